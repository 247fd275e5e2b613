//! Metering real process trees: memory, CPU of exited and re-parented descendants, processes
//! vanishing while a sample is read.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

use rm_runner::{sample_tree, AttemptMeter, ProcessIdentity, Snapshot, TreeSample, TreeState};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Generous: the machine may be busy with builds.
const DEADLINE: Duration = Duration::from_secs(30);
const MIB: u64 = 1 << 20;

fn python() -> &'static str {
    // The system interpreter, not a version manager's shim that forks on its way in.
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// `sh -c script` in its own process group and a scratch directory; the whole group is
/// killed when the test ends, re-parented members included.
struct Tree {
    child: Child,
    dir: tempfile::TempDir,
    root: ProcessIdentity,
    state: TreeState,
    meter: AttemptMeter,
}

impl Tree {
    fn spawn(script: &str, env: &[(&str, &str)]) -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir.path())
            .env("PY", python())
            .envs(env.iter().copied())
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        let root = poll(|| Snapshot::read().unwrap().identity(pid)).expect("root in /proc");
        Tree {
            child,
            dir,
            root,
            state: TreeState::new(),
            meter: AttemptMeter::new(started),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn touch(&self, name: &str) {
        std::fs::write(self.path(name), b"").unwrap();
    }

    fn exists(&self, name: &str) -> bool {
        self.path(name).exists()
    }

    fn pid_in(&self, name: &str) -> Option<u32> {
        std::fs::read_to_string(self.path(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Samples and feeds the meter.
    fn sample(&mut self) -> TreeSample {
        let sample = sample_tree(self.root, &mut self.state).unwrap();
        self.meter.record(Instant::now(), &sample);
        sample
    }

    /// Samples every 100 ms until `done` says yes (or the deadline: panics).
    fn sample_until(&mut self, what: &str, mut done: impl FnMut(&Tree, &TreeSample) -> bool) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let sample = self.sample();
            if done(self, &sample) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

fn poll<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The test's own reading of a process's resident memory.
fn vm_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn within(actual: u64, expected: u64, tolerance: f64) -> bool {
    (actual as f64 - expected as f64).abs() <= expected as f64 * tolerance
}

/// Waits for "go", allocates and touches 40 MiB, says "ready", holds it until "stop".
const ALLOCATE: &str = r#"
import os, sys, time
name = sys.argv[1]
open(name + ".started", "w").close()
deadline = time.time() + 60
while not os.path.exists("go") and time.time() < deadline:
    time.sleep(0.05)
data = b"\x01" * (40 << 20)
open(name + ".ready", "w").close()
while not os.path.exists("stop") and time.time() < deadline:
    time.sleep(0.1)
"#;

#[test]
fn peak_rss_covers_the_memory_children_allocate() {
    let mut tree = Tree::spawn(
        r#""$PY" -c "$ALLOCATE" a & "$PY" -c "$ALLOCATE" b & wait"#,
        &[("ALLOCATE", ALLOCATE)],
    );
    tree.sample_until("both children started", |t, s| {
        t.exists("a.started") && t.exists("b.started") && s.processes.len() == 3
    });
    let baseline = tree.sample().rss_bytes();
    tree.touch("go");
    tree.sample_until("both allocations", |t, _| {
        t.exists("a.ready") && t.exists("b.ready")
    });
    let last = tree.sample();
    let peak = tree.meter.summary().peak_rss_bytes;

    let expected = baseline + 80 * MIB;
    assert!(
        within(peak, expected, 0.10),
        "peak {} MiB, expected baseline {} MiB + 80 MiB",
        peak / MIB,
        baseline / MIB
    );
    let own: u64 = last.processes.iter().map(|p| vm_rss_bytes(p.id.pid)).sum();
    assert!(
        within(last.rss_bytes(), own, 0.10),
        "sampled {} B, VmRSS of the members {} B",
        last.rss_bytes(),
        own
    );
    tree.touch("stop");
}

/// Burns a second of CPU, then exits (after a pause, so the last sample sees it all).
const BURN: &str = r#"
import time
start = time.process_time()
while time.process_time() - start < 1.0:
    pass
time.sleep(1)
"#;

#[test]
fn cpu_of_an_exited_child_stays_counted() {
    let mut tree = Tree::spawn(
        r#""$PY" -c "$BURN" & echo $! > burner.pid; wait; touch exited; sleep 60"#,
        &[("BURN", BURN)],
    );
    let burner = poll(|| tree.pid_in("burner.pid")).expect("burner started");
    tree.sample_until("the burner to exit", |t, s| {
        t.exists("exited") && !s.contains(burner)
    });
    let last = tree.sample();
    let cpu = tree.meter.summary().cpu;
    assert!(cpu >= Duration::from_millis(800), "counted only {cpu:?}");
    // The live members alone (sh and sleep) used next to nothing: the second is the
    // exited child's.
    assert!(last.cpu() < Duration::from_millis(500), "{:?}", last.cpu());
}

/// Waits to be re-parented, burns half a second of CPU, then idles until "stop".
const ORPHAN: &str = r#"
import os, time
deadline = time.time() + 60
while not os.path.exists("reparented") and time.time() < deadline:
    time.sleep(0.05)
start = time.process_time()
while time.process_time() - start < 0.5:
    pass
open("burned", "w").close()
while not os.path.exists("stop") and time.time() < deadline:
    time.sleep(0.1)
"#;

/// The middle process starts the orphan-to-be and exits when "release" appears.
const MIDDLE: &str = r#""$PY" -c "$ORPHAN" & echo $! > orphan.pid
while [ ! -e release ]; do sleep 0.1; done"#;

#[test]
fn a_re_parented_descendant_is_still_counted() {
    let mut tree = Tree::spawn(
        r#"sh -c "$MIDDLE" & echo $! > middle.pid; wait; sleep 60"#,
        &[("MIDDLE", MIDDLE), ("ORPHAN", ORPHAN)],
    );
    let middle = poll(|| tree.pid_in("middle.pid")).expect("middle started");
    let orphan = poll(|| tree.pid_in("orphan.pid")).expect("orphan started");
    tree.sample_until("the orphan-to-be in the tree", |_, s| s.contains(orphan));

    tree.touch("release");
    tree.sample_until("the orphan re-parented", |_, s| {
        !s.contains(middle) && ppid(orphan).is_some_and(|p| p != middle)
    });
    let before = tree.meter.summary().cpu;
    tree.touch("reparented");
    tree.sample_until("the orphan's burn", |t, _| t.exists("burned"));
    let last = tree.sample();

    assert!(last.contains(orphan), "the orphan dropped out of the tree");
    assert!(last.rss_bytes() >= vm_rss_bytes(orphan));
    let burned = tree.meter.summary().cpu.saturating_sub(before);
    assert!(
        burned >= Duration::from_millis(400),
        "counted only {burned:?}"
    );
    tree.touch("stop");
}

#[test]
fn processes_vanishing_while_sampled_are_skipped() {
    // Hundreds of members that exit as soon as they start, sampled as fast as possible.
    let mut tree = Tree::spawn(
        r#"i=0; while [ $i -lt 400 ]; do /bin/true & i=$((i+1)); done; wait; touch done; sleep 60"#,
        &[],
    );
    let deadline = Instant::now() + DEADLINE;
    let mut most = 0;
    while !tree.exists("done") {
        assert!(Instant::now() < deadline, "the loop did not finish");
        most = most.max(tree.sample().processes.len());
    }
    let last = tree.sample();
    // sh and its sleep; everything that ended is forgotten.
    assert!(last.processes.len() <= 2, "{:?}", last.processes);
    assert!(
        tree.state.len() <= 2,
        "{} members remembered",
        tree.state.len()
    );
    assert!(most >= 1);
}

#[test]
fn a_root_that_is_gone_gives_an_empty_sample() {
    let mut state = TreeState::new();
    let gone = ProcessIdentity {
        pid: u32::MAX - 1,
        start_time: 1,
    };
    assert!(sample_tree(gone, &mut state).unwrap().is_empty());
    // Our own pid with another start time is someone else.
    let me = Snapshot::read()
        .unwrap()
        .identity(std::process::id())
        .unwrap();
    let recycled = ProcessIdentity {
        start_time: me.start_time + 1,
        ..me
    };
    assert!(sample_tree(recycled, &mut state).unwrap().is_empty());
    assert!(state.is_empty());
}

#[test]
fn a_process_whose_name_is_not_utf8_is_sampled() {
    use std::os::unix::ffi::OsStrExt;
    // The kernel shows the executable's file name in /proc/<pid>/stat byte for byte.
    let bin = tempfile::tempdir().unwrap();
    let odd = bin.path().join(std::ffi::OsStr::from_bytes(b"sl\xffep"));
    std::fs::copy("/bin/sleep", odd).unwrap();
    let mut tree = Tree::spawn(
        r#""$BIN"/sl*ep 60 & echo $! > odd.pid; wait"#,
        &[("BIN", bin.path().to_str().unwrap())],
    );
    let odd = poll(|| tree.pid_in("odd.pid")).expect("started");
    tree.sample_until("the oddly named process in the tree", |_, s| {
        s.contains(odd)
    });
}
