//! Which processes belong to a tree, decided over a [`Snapshot`] (no `/proc` here, so it is
//! tested with hand-made snapshots).

use super::{MeterError, ProcessSample, TreeSample};
use crate::process::ProcessIdentity;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// What a sample needs of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcRecord {
    pub pid: u32,
    pub ppid: u32,
    pub start_time: u64,
    pub cpu: Duration,
    pub rss_bytes: u64,
}

/// Every process on the machine at one moment (as far as it could be read).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    procs: HashMap<u32, ProcRecord>,
    /// ppid → pids, built once so several trees can be walked over one snapshot.
    children: HashMap<u32, Vec<u32>>,
    /// Listed but not readable (permission, unparsable): neither present nor known gone.
    unreadable: HashSet<u32>,
}

impl Snapshot {
    /// Reads every process's stat (Linux). Costs one small file read per process on the
    /// machine.
    pub fn read() -> Result<Snapshot, MeterError> {
        #[cfg(target_os = "linux")]
        {
            super::linux::read_snapshot()
        }
        #[cfg(not(target_os = "linux"))]
        {
            Err(MeterError::Unsupported {
                what: "metering process trees",
            })
        }
    }

    /// The identity of the process `pid` in this snapshot.
    pub fn identity(&self, pid: u32) -> Option<ProcessIdentity> {
        self.procs.get(&pid).map(|r| ProcessIdentity {
            pid,
            start_time: r.start_time,
        })
    }

    /// How many processes could be read.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    // Filled only by the Linux reader (and the tests).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn insert(&mut self, record: ProcRecord) {
        self.children
            .entry(record.ppid)
            .or_default()
            .push(record.pid);
        self.procs.insert(record.pid, record);
    }

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn insert_unreadable(&mut self, pid: u32) {
        self.unreadable.insert(pid);
    }

    fn get(&self, id: ProcessIdentity) -> Option<&ProcRecord> {
        self.procs
            .get(&id.pid)
            .filter(|r| r.start_time == id.start_time)
    }

    fn children_of(&self, pid: u32) -> &[u32] {
        self.children.get(&pid).map_or(&[], Vec::as_slice)
    }
}

/// An attempt's tree as the meter knows it: every process seen as the root or its descendant
/// and not yet seen gone (pid → start time, so a recycled pid is not taken for a member).
#[derive(Debug, Clone, Default)]
pub struct TreeState {
    members: HashMap<u32, u64>,
}

impl TreeState {
    pub fn new() -> TreeState {
        TreeState::default()
    }

    /// Members remembered (present or unreadable at the last sample).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Drops the members that are gone from `snapshot` and returns them. An unreadable pid
    /// is kept: it may still be ours.
    fn drop_ended(&mut self, snapshot: &Snapshot) -> Vec<ProcessIdentity> {
        let mut ended = Vec::new();
        self.members.retain(|&pid, &mut start_time| {
            let id = ProcessIdentity { pid, start_time };
            let keep = snapshot.unreadable.contains(&pid) || snapshot.get(id).is_some();
            if !keep {
                ended.push(id);
            }
            keep
        });
        ended
    }

    /// Adds every process whose parent is a member, transitively. Members found by their
    /// ppid before stay members after re-parenting, and their own children are found from
    /// them, not from the root.
    fn adopt_descendants(&mut self, snapshot: &Snapshot) {
        let mut queue: Vec<u32> = self.members.keys().copied().collect();
        while let Some(parent) = queue.pop() {
            for &child in snapshot.children_of(parent) {
                let Some(record) = snapshot.procs.get(&child) else {
                    continue;
                };
                if self.members.insert(child, record.start_time).is_none() {
                    queue.push(child);
                }
            }
        }
    }

    fn samples(&self, snapshot: &Snapshot) -> Vec<ProcessSample> {
        self.members
            .iter()
            .filter_map(|(&pid, &start_time)| {
                let id = ProcessIdentity { pid, start_time };
                snapshot.get(id).map(|r| ProcessSample {
                    id,
                    cpu: r.cpu,
                    rss_bytes: r.rss_bytes,
                })
            })
            .collect()
    }
}

/// Samples the tree under `root` from an already read snapshot, updating `known`.
pub fn sample_in(snapshot: &Snapshot, root: ProcessIdentity, known: &mut TreeState) -> TreeSample {
    let ended = known.drop_ended(snapshot);
    if snapshot.get(root).is_some() {
        known.members.insert(root.pid, root.start_time);
    }
    known.adopt_descendants(snapshot);
    TreeSample {
        processes: known.samples(snapshot),
        ended,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rec(pid: u32, ppid: u32, start_time: u64) -> ProcRecord {
        ProcRecord {
            pid,
            ppid,
            start_time,
            cpu: Duration::from_millis(u64::from(pid)),
            rss_bytes: 1000 * u64::from(pid),
        }
    }

    fn snapshot(records: &[ProcRecord]) -> Snapshot {
        let mut s = Snapshot::default();
        for r in records {
            s.insert(*r);
        }
        s
    }

    fn pids(sample: &TreeSample) -> Vec<u32> {
        let mut v: Vec<u32> = sample.processes.iter().map(|p| p.id.pid).collect();
        v.sort_unstable();
        v
    }

    const ROOT: ProcessIdentity = ProcessIdentity {
        pid: 10,
        start_time: 100,
    };

    #[test]
    fn finds_descendants_and_not_others() {
        let snap = snapshot(&[
            rec(1, 0, 1),
            rec(10, 1, 100),
            rec(11, 10, 101),
            rec(12, 11, 102),
            rec(20, 1, 50),
        ]);
        let mut state = TreeState::new();
        let s = sample_in(&snap, ROOT, &mut state);
        assert_eq!(pids(&s), vec![10, 11, 12]);
        assert_eq!(s.rss_bytes(), 33_000);
        assert_eq!(s.cpu(), Duration::from_millis(33));
        assert!(s.ended.is_empty());
    }

    #[test]
    fn keeps_re_parented_descendants_and_their_children() {
        let mut state = TreeState::new();
        sample_in(
            &snapshot(&[rec(10, 1, 100), rec(11, 10, 101), rec(12, 11, 102)]),
            ROOT,
            &mut state,
        );
        // 11 exited; 12 went to init and then started 13.
        let s = sample_in(
            &snapshot(&[rec(10, 1, 100), rec(12, 1, 102), rec(13, 12, 103)]),
            ROOT,
            &mut state,
        );
        assert_eq!(pids(&s), vec![10, 12, 13]);
        assert_eq!(
            s.ended,
            vec![ProcessIdentity {
                pid: 11,
                start_time: 101
            }]
        );
        // The root exits too: what it left behind is still the tree.
        let s = sample_in(&snapshot(&[rec(12, 1, 102)]), ROOT, &mut state);
        assert_eq!(pids(&s), vec![12]);
    }

    #[test]
    fn a_recycled_pid_is_not_a_member() {
        let mut state = TreeState::new();
        sample_in(
            &snapshot(&[rec(10, 1, 100), rec(11, 10, 101)]),
            ROOT,
            &mut state,
        );
        let s = sample_in(
            &snapshot(&[rec(10, 1, 100), rec(11, 1, 999)]),
            ROOT,
            &mut state,
        );
        assert_eq!(pids(&s), vec![10]);
        assert_eq!(s.ended.len(), 1);
        // Nor is a root whose pid was recycled, nor its children.
        let mut fresh = TreeState::new();
        let s = sample_in(
            &snapshot(&[rec(10, 1, 555), rec(11, 10, 556)]),
            ROOT,
            &mut fresh,
        );
        assert!(s.is_empty());
        assert!(fresh.is_empty());
    }

    #[test]
    fn an_unreadable_member_is_kept_but_not_sampled() {
        let mut state = TreeState::new();
        sample_in(
            &snapshot(&[rec(10, 1, 100), rec(11, 10, 101)]),
            ROOT,
            &mut state,
        );
        let mut snap = snapshot(&[rec(10, 1, 100)]);
        snap.insert_unreadable(11);
        let s = sample_in(&snap, ROOT, &mut state);
        assert_eq!(pids(&s), vec![10]);
        assert!(s.ended.is_empty());
        assert_eq!(state.len(), 2);
        let s = sample_in(
            &snapshot(&[rec(10, 1, 100), rec(11, 10, 101)]),
            ROOT,
            &mut state,
        );
        assert_eq!(pids(&s), vec![10, 11]);
    }

    #[test]
    fn a_parent_cycle_in_bad_input_ends() {
        // /proc cannot say this, but a walk over outside input must not loop.
        let mut state = TreeState::new();
        let s = sample_in(
            &snapshot(&[rec(10, 11, 100), rec(11, 10, 101)]),
            ROOT,
            &mut state,
        );
        assert_eq!(pids(&s), vec![10, 11]);
    }
}
