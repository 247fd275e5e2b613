//! Filling a runtime from a cached package as fast as the filesystem allows: a reflink
//! (copy-on-write clone) per file where supported, otherwise a copy spread over a few threads.
//! Exec bits are kept, symlinks stay links (pointing inside the runtime).

use crate::package::extract::stays_inside;
use crate::runtime::Ownership;
use std::fs;
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    /// Worker threads for copies/clones (copying is IO-bound: more threads than cores help).
    pub threads: usize,
    /// Chown everything to this identity (the runner's), when set.
    pub owner: Option<Ownership>,
}

/// Worker threads for a materialization: twice the cores (each file is a few metadata
/// syscalls that mostly wait on the filesystem's journal), between 2 and 8 — more threads
/// than that only contend for the same directories and log.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get() * 2)
        .unwrap_or(4)
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

struct Tree {
    /// Relative directory paths, parents before children, with their modes.
    dirs: Vec<(PathBuf, u32)>,
    /// Relative file paths with their modes and sizes.
    files: Vec<(PathBuf, u32, u64)>,
    /// Relative link paths with their targets.
    links: Vec<(PathBuf, PathBuf)>,
}

fn scan(root: &Path) -> Result<Tree, MaterializeError> {
    let mut tree = Tree {
        dirs: Vec::new(),
        files: Vec::new(),
        links: Vec::new(),
    };
    let mut queue = std::collections::VecDeque::from([PathBuf::new()]);
    while let Some(rel) = queue.pop_front() {
        let abs = root.join(&rel);
        for entry in fs::read_dir(&abs).map_err(io_at(&abs))? {
            let entry = entry.map_err(io_at(&abs))?;
            let child = rel.join(entry.file_name());
            // The type comes from the directory entry itself (no stat); only files and
            // directories need one, for their modes, and it is relative to the open directory.
            let kind = entry.file_type().map_err(io_at(&entry.path()))?;
            if kind.is_symlink() {
                let target = fs::read_link(entry.path()).map_err(io_at(&entry.path()))?;
                tree.links.push((child, target));
                continue;
            }
            // `DirEntry::metadata` does not follow links: a racing swap cannot smuggle one in.
            let meta = entry.metadata().map_err(io_at(&entry.path()))?;
            let kind = meta.file_type();
            let mode = meta.permissions().mode() & 0o7777;
            if kind.is_dir() {
                tree.dirs.push((child.clone(), mode));
                queue.push_back(child);
            } else if kind.is_file() {
                tree.files.push((child, mode, meta.len()));
            } else if kind.is_symlink() {
                let target = fs::read_link(entry.path()).map_err(io_at(&entry.path()))?;
                tree.links.push((child, target));
            } else {
                return Err(MaterializeError::SpecialFile { path: entry.path() });
            }
        }
    }
    Ok(tree)
}

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

    for (rel, _) in &tree.dirs {
        let dst = runtime.join(rel);
        fs::create_dir(&dst).map_err(io_at(&dst))?;
    }

    let method = match options.method {
        CopyMethod::SerialCopy => UsedMethod::SerialCopy,
        CopyMethod::ParallelCopy => UsedMethod::ParallelCopy,
        CopyMethod::Clone => UsedMethod::Clone,
        CopyMethod::Auto => probe_clone(package, runtime, &tree)?,
    };
    let threads = match method {
        UsedMethod::SerialCopy => 1,
        _ => options.threads.clamp(1, 64).min(tree.files.len().max(1)),
    };

    let umask = current_umask();
    let bytes = AtomicU64::new(0);
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<MaterializeError>> = Mutex::new(None);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some((rel, mode, size)) = tree.files.get(i) else {
            break;
        };
        if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
            break;
        }
        let result = copy_one(
            package,
            runtime,
            rel,
            (*mode, *size),
            method,
            options.owner,
            umask,
        );
        match result {
            Ok(()) => {
                bytes.fetch_add(*size, Ordering::Relaxed);
            }
            Err(e) => {
                if let Ok(mut f) = failure.lock() {
                    f.get_or_insert(e);
                }
                break;
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
    // Directory modes last (the cache's are read-only), owner access always kept so the
    // runner can write into its own tree and scrub can remove it.
    for (rel, mode) in tree.dirs.iter().rev() {
        let dst = runtime.join(rel);
        if let Some(o) = options.owner {
            std::os::unix::fs::lchown(&dst, Some(o.uid), Some(o.gid)).map_err(io_at(&dst))?;
        }
        fs::set_permissions(&dst, fs::Permissions::from_mode((mode | 0o700) & 0o755))
            .map_err(io_at(&dst))?;
    }

    let report = MaterializeReport {
        method,
        files: tree.files.len(),
        dirs: tree.dirs.len(),
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
    let Some((rel, _, _)) = tree.files.first() else {
        return Ok(UsedMethod::ParallelCopy);
    };
    let dst = runtime.join(rel);
    match reflink_copy::reflink(package.join(rel), &dst) {
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

/// One file: the destination is created with its final mode (set-id bits dropped — a runner
/// has no business with them — and owner write added so the runner may change its copy), then
/// filled by a clone or an in-kernel copy, then chowned — all through the open descriptors, so
/// no path is resolved twice and no separate chmod is needed unless the umask took bits away.
fn copy_one(
    package: &Path,
    runtime: &Path,
    rel: &Path,
    (mode, size): (u32, u64),
    method: UsedMethod,
    owner: Option<Ownership>,
    umask: u32,
) -> Result<(), MaterializeError> {
    let src_path = package.join(rel);
    let dst_path = runtime.join(rel);
    let perm = (mode & 0o777) | 0o200;
    let mut src = fs::File::open(&src_path).map_err(io_at(&src_path))?;
    let mut dst = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(perm)
        .open(&dst_path)
        .map_err(io_at(&dst_path))?;
    let filled = match method {
        // A clone of a small file costs a reflink transaction (shared-extent bookkeeping)
        // for less than a block or two of data; writing it into the page cache is cheaper.
        UsedMethod::Clone if size <= SMALL_FILE => {
            copy_small(&mut src, &mut dst, size).map_err(io_at(&dst_path))
        }
        UsedMethod::Clone => reflink_copy::reflink_file(&src, &dst).map_err(|source| {
            MaterializeError::CloneUnsupported {
                path: dst_path.clone(),
                source,
            }
        }),
        // `io::copy` between two files is `copy_file_range` (or sendfile) in the kernel.
        UsedMethod::ParallelCopy | UsedMethod::SerialCopy => io::copy(&mut src, &mut dst)
            .map(drop)
            .map_err(io_at(&dst_path)),
    };
    if let Err(e) = filled {
        drop(dst);
        // A failed fill leaves an empty or partial destination behind; the error is what matters.
        let _ = fs::remove_file(&dst_path);
        return Err(e);
    }
    if let Some(o) = owner {
        std::os::unix::fs::fchown(&dst, Some(o.uid), Some(o.gid)).map_err(io_at(&dst_path))?;
    }
    // Chown clears only set-id bits, which are not set; the umask may have cleared others.
    if perm & umask != 0 {
        dst.set_permissions(fs::Permissions::from_mode(perm))
            .map_err(io_at(&dst_path))?;
    }
    Ok(())
}

/// Files up to this size are written rather than cloned (see `copy_one`).
const SMALL_FILE: u64 = 16 * 1024;

/// Reads a small file whole and writes it out (its size from the scan is only a hint: a file
/// that grew is still copied whole).
fn copy_small(src: &mut fs::File, dst: &mut fs::File, size: u64) -> io::Result<()> {
    use std::io::{Read, Write};
    let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0) + 1);
    src.read_to_end(&mut buf)?;
    dst.write_all(&buf)
}
