//! A cgroup v2 of a test's own, as systemd gives a service with `Delegate=yes`: made under
//! the unified hierarchy, optionally handed to an ordinary user, and removed with everything
//! left in it when dropped.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A delegated test cgroup.
#[derive(Debug)]
pub struct TestCgroup {
    pub dir: PathBuf,
}

/// The unified hierarchy's mount point, from `/proc/self/mountinfo`.
fn unified_mount() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2")
            .then(|| left.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

impl TestCgroup {
    /// A new cgroup named after this process and `tag`; `None` where this process may not make
    /// one (not root, or no cgroup v2): the caller says what it then does without.
    pub fn new(tag: &str) -> Option<TestCgroup> {
        let mount = unified_mount()?;
        let dir = mount.join(format!("rm-test-{}-{tag}", std::process::id()));
        fs::create_dir(&dir).ok()?;
        Some(TestCgroup { dir })
    }

    /// Hands it to `uid`/`gid` as systemd's delegation does: the directory and the files
    /// that let its owner create children and move processes within it.
    pub fn delegate_to(&self, uid: u32, gid: u32) -> std::io::Result<()> {
        for p in [
            self.dir.clone(),
            self.dir.join("cgroup.procs"),
            self.dir.join("cgroup.subtree_control"),
            self.dir.join("cgroup.threads"),
        ] {
            std::os::unix::fs::chown(&p, Some(uid), Some(gid))?;
        }
        Ok(())
    }

    /// Where a process starting in it goes: the service's own leaf once the service made one
    /// (a cgroup that hands controllers down may hold no process itself), else the top.
    pub fn entry(&self) -> PathBuf {
        let leaf = self.dir.join("service");
        if leaf.is_dir() {
            leaf
        } else {
            self.dir.clone()
        }
    }

    /// The cgroup directories below it whose name is `name`, at any depth.
    pub fn find(&self, name: &str) -> Vec<PathBuf> {
        fn walk(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
            for e in fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    if e.file_name() == name {
                        out.push(p.clone());
                    }
                    walk(&p, name, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.dir, name, &mut out);
        out
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        fn remove(dir: &Path) {
            for e in fs::read_dir(dir).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    remove(&e.path());
                }
            }
            let _ = fs::write(dir.join("cgroup.kill"), "1");
            for _ in 0..500 {
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        remove(&self.dir);
    }
}
