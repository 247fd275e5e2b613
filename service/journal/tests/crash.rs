//! Crash safety: a writer killed with SIGKILL in the middle of a stream of
//! commits leaves a journal that opens, passes `integrity_check`, and holds
//! every write the writer saw committed.
//!
//! The writer is this very test binary, re-executed to run only
//! `crash_child_writer` (ignored in normal runs; it does nothing unless the
//! marker variable is set). It prints one `ACK` line after each commit
//! returns; the parent kills it after a number of ACKs and then checks the
//! file against every ACK it received, including those still in the pipe.
#![cfg(unix)]
// Helpers outside #[test] fns unwrap too: a panic there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rm_core::{
    Attempt, AttemptId, AttemptState, LabelSet, PolicyId, PolicySpec, Target, Timestamp,
};
use rm_journal::Journal;

/// Set (to the journal path) only in the re-executed child.
const CHILD_ENV: &str = "RM_JOURNAL_CRASH_CHILD_JOURNAL";
const CHILD_TEST: &str = "crash_child_writer";
/// The child stops on its own after this long, so a lost parent never leaves it running.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);
const ACK_DEADLINE: Duration = Duration::from_secs(30);

fn attempt_id(n: u64) -> AttemptId {
    AttemptId::new(format!("crash{n:08}")).unwrap()
}

/// The child: an endless stream of journal writes, each acknowledged on stdout
/// only after its commit returned.
#[test]
#[ignore = "child process of killed_writer_leaves_a_consistent_journal; does nothing on its own"]
fn crash_child_writer() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mut journal = Journal::open(&path).unwrap();
    let mut policy = match journal.list_policies().unwrap().into_iter().next() {
        Some(policy) => policy,
        None => {
            let mut spec = PolicySpec::new(
                Target::parse("crash/test").unwrap(),
                LabelSet::parse(["rm-crash-linux-x64"]).unwrap(),
            );
            spec.max_capacity = Some(1);
            journal.insert_policy(&spec).unwrap()
        }
    };
    // Resume after whatever earlier (killed) children wrote, first finishing an
    // attempt a kill left half-done, as startup recovery would.
    let existing = journal.attempts_for_policy(policy.id()).unwrap();
    for before in existing
        .iter()
        .filter(|a| a.state() == AttemptState::Allocated)
    {
        let mut attempt = before.clone();
        let n = existing.iter().position(|a| a == before).unwrap() as u64;
        attempt.record_jit(n, before.created_at()).unwrap();
        journal.update_attempt(before, &attempt).unwrap();
    }
    let first = existing.len() as u64;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let started = Instant::now();
    for n in first.. {
        if started.elapsed() > CHILD_LIFETIME {
            return;
        }
        let now = Timestamp::from_millis(n as i64 * 10);
        let mut attempt = Attempt::allocate(attempt_id(n), policy.id(), now);
        journal.insert_attempt(&attempt).unwrap();
        if writeln!(out, "ACK insert {n}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return; // parent gone
        }

        let before = attempt.clone();
        attempt.record_jit(n, now).unwrap();
        journal.update_attempt(&before, &attempt).unwrap();
        if writeln!(out, "ACK jit {n}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }

        let mut next = policy.clone();
        next.set_capacity(Some(1 + (n % 50) as u32), 0).unwrap();
        policy = journal.update_policy(&next).unwrap();
        if writeln!(out, "ACK policy {} {}", policy.revision(), n % 50 + 1)
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
    }
}

/// Kills the child if the parent test fails before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the child acknowledged before it died.
#[derive(Debug, Default)]
struct Acked {
    inserted: BTreeMap<u64, bool>, // n -> jit acknowledged
    policy: Option<(u64, u32)>,    // last (revision, max_capacity)
    lines: usize,
}

impl Acked {
    fn record(&mut self, line: &str) {
        // libtest prints "test crash_child_writer ... " without a newline
        // before the test's own output, so an ACK may start mid-line.
        let Some(start) = line.find("ACK ") else {
            return;
        };
        let words: Vec<&str> = line[start..].split_whitespace().collect();
        match words.as_slice() {
            ["ACK", "insert", n] => {
                self.inserted.insert(n.parse().unwrap(), false);
            }
            ["ACK", "jit", n] => {
                *self.inserted.get_mut(&n.parse().unwrap()).unwrap() = true;
            }
            ["ACK", "policy", rev, max] => {
                self.policy = Some((rev.parse().unwrap(), max.parse().unwrap()));
            }
            _ => return, // libtest's own output
        }
        self.lines += 1;
    }
}

/// Run one child until it acknowledged `kill_after` more writes, SIGKILL it,
/// and return everything it acknowledged.
fn run_and_kill(path: &Path, kill_after: usize) -> Acked {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_TEST, "--nocapture", "--include-ignored"])
        .args(["--test-threads", "1"])
        .env(CHILD_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let mut acked = Acked::default();
    let deadline = Instant::now() + ACK_DEADLINE;
    while acked.lines < kill_after {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => acked.record(&line),
            Err(e) => panic!(
                "child stopped acknowledging after {} writes: {e}",
                acked.lines
            ),
        }
    }
    child.0.kill().unwrap(); // SIGKILL on Unix: no destructors, no clean close
    let status = child.0.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "child must die by SIGKILL: {status:?}"
    );
    // ACKs already in the pipe were printed after their commits: they count too.
    reader.join().unwrap();
    for line in rx.try_iter() {
        acked.record(&line);
    }
    acked
}

#[test]
fn killed_writer_leaves_a_consistent_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite3");
    let mut all_inserted: BTreeMap<u64, bool> = BTreeMap::new();

    // Several kills at different points, each child resuming on the same file.
    for (round, kill_after) in [60, 91, 125].into_iter().enumerate() {
        let acked = run_and_kill(&path, kill_after);
        assert!(acked.lines >= kill_after);
        all_inserted.extend(acked.inserted.iter().map(|(n, jit)| (*n, *jit)));

        let mut journal = Journal::open(&path).unwrap();
        assert_eq!(journal.integrity_check().unwrap(), Vec::<String>::new());

        // Every acknowledged write is there, exactly as acknowledged.
        let policy = journal.get_policy(PolicyId::new(1)).unwrap().unwrap();
        let attempts = journal.attempts_for_policy(policy.id()).unwrap();
        for (n, jit_acked) in &all_inserted {
            let a = journal.get_attempt(&attempt_id(*n)).unwrap();
            let a =
                a.unwrap_or_else(|| panic!("round {round}: acknowledged attempt {n} is missing"));
            if *jit_acked {
                assert_eq!(
                    a.state(),
                    AttemptState::JitReceived,
                    "round {round}: attempt {n}"
                );
                assert_eq!(a.runner_id(), Some(*n));
            }
        }
        let (rev, max) = acked.policy.unwrap();
        // At most one commit can be unacknowledged (killed between commit and print).
        assert!(
            policy.revision() == rev || policy.revision() == rev + 1,
            "round {round}: acknowledged revision {rev}, stored {}",
            policy.revision()
        );
        if policy.revision() == rev {
            assert_eq!(policy.max_capacity(), Some(max));
        }

        // Invariants: attempts are numbered without gaps, at most one beyond the
        // last acknowledged insert, all but the newest two fully written.
        let last_acked = *all_inserted.keys().next_back().unwrap();
        let count = attempts.len() as u64;
        assert!(
            count == last_acked + 1 || count == last_acked + 2,
            "round {round}: {count} rows, last acknowledged insert {last_acked}"
        );
        for (i, a) in attempts.iter().enumerate() {
            assert_eq!(a.id(), &attempt_id(i as u64));
            if (i as u64) + 2 < count {
                assert_eq!(
                    a.state(),
                    AttemptState::JitReceived,
                    "round {round}: row {i}"
                );
            }
        }
        assert_eq!(journal.active_total().unwrap(), count as u32);
        assert_eq!(journal.uncleaned_attempts().unwrap().len() as u64, count);
    }
}
