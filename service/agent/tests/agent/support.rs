//! In-memory fakes of the four ports. Each records the calls that matter in one shared
//! `CallLog`, so tests can assert the order of effects across ports.

#![allow(dead_code)]

use rm_agent::{
    ActiveCounts, AgentEvent, DeleteOutcome, DemandSnapshot, EventKind, FakeClock, GhError,
    GitHubPort, HostError, HostShared, Jit, JitSecret, JournalError, JournalPort, Ports,
    RunnerHostPort, RunnerStatus, RunnerView, ScrubError, SpawnFor, TargetLoop,
};
use rm_core::{
    Attempt, AttemptId, AttemptState, Evidence, HostCheck, JobDemand, LabelSet, Observed, Policy,
    PolicyId, PolicyParts, PolicyState, ProcessIdentity, ProfileName, RunsOn, Target, Timestamp,
    WorkspaceMode,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

pub const LABEL: &str = "rm-home-linux-x64";
pub const T0: i64 = 1_764_000_000_000;

pub type CallLog = Arc<Mutex<Vec<String>>>;

fn push(log: &CallLog, entry: impl Into<String>) {
    log.lock().unwrap().push(entry.into());
}

// ---------------------------------------------------------------- journal

#[derive(Default)]
pub struct JState {
    pub policies: Vec<Policy>,
    pub attempts: BTreeMap<AttemptId, Attempt>,
    pub capacity: u32,
    pub fail_policies: bool,
    /// Highest number of active attempts ever stored at once.
    pub high_water: u32,
    pub updates: u32,
    /// The next update to this state fails (a crash or a full disk at that point).
    pub fail_update_to: Option<AttemptState>,
    /// Reads of the uncleaned attempts and of the host capacity (what an idle pass may skip).
    pub uncleaned_reads: u32,
    pub capacity_reads: u32,
    pub counts_reads: u32,
    /// The verdicts journalled with attempts.
    pub trust: BTreeMap<AttemptId, rm_core::TrustVerdict>,
    /// Journalling a verdict fails (a full disk).
    pub fail_trust: bool,
}

pub struct FakeJournal {
    pub state: Mutex<JState>,
    log: CallLog,
}

impl FakeJournal {
    pub fn new(log: CallLog, capacity: u32) -> Self {
        FakeJournal {
            state: Mutex::new(JState {
                capacity,
                ..JState::default()
            }),
            log,
        }
    }

    pub fn add_policy(&self, id: i64, target: &Target, max: Option<u32>, state: PolicyState) {
        let policy = Policy::from_parts(PolicyParts {
            id: PolicyId::new(id),
            target: target.clone(),
            profile: ProfileName::default(),
            enabled: state != PolicyState::Disabled && state != PolicyState::Draining,
            state,
            max_capacity: max,
            min_capacity: 0,
            labels: LabelSet::parse([LABEL]).unwrap(),
            workspace_mode: WorkspaceMode::Ephemeral,
            revision: 1,
        })
        .unwrap();
        self.state.lock().unwrap().policies.push(policy);
    }

    pub fn policy(&self, id: i64) -> Policy {
        let st = self.state.lock().unwrap();
        st.policies
            .iter()
            .find(|p| p.id() == PolicyId::new(id))
            .cloned()
            .unwrap()
    }

    pub fn put(&self, attempt: Attempt) {
        self.state
            .lock()
            .unwrap()
            .attempts
            .insert(attempt.id().clone(), attempt);
    }

    pub fn attempt(&self, id: &AttemptId) -> Attempt {
        self.state.lock().unwrap().attempts[id].clone()
    }

    pub fn attempts(&self) -> Vec<Attempt> {
        self.state
            .lock()
            .unwrap()
            .attempts
            .values()
            .cloned()
            .collect()
    }

    pub fn active(&self) -> u32 {
        let st = self.state.lock().unwrap();
        st.attempts
            .values()
            .filter(|a| a.counts_against_capacity())
            .count() as u32
    }

    pub fn updates(&self) -> u32 {
        self.state.lock().unwrap().updates
    }
}

impl JournalPort for FakeJournal {
    async fn put_trust(
        &self,
        attempt: &AttemptId,
        verdict: &rm_core::TrustVerdict,
    ) -> Result<(), JournalError> {
        let mut st = self.state.lock().unwrap();
        if st.fail_trust {
            return Err(JournalError::Unavailable {
                detail: "disk full".into(),
            });
        }
        st.trust.insert(attempt.clone(), verdict.clone());
        Ok(())
    }

    async fn trust_of(
        &self,
        attempt: &AttemptId,
    ) -> Result<Option<rm_core::TrustVerdict>, JournalError> {
        Ok(self.state.lock().unwrap().trust.get(attempt).cloned())
    }

    async fn policies(&self, target: &Target) -> Result<Vec<Policy>, JournalError> {
        let st = self.state.lock().unwrap();
        if st.fail_policies {
            return Err(JournalError::Unavailable {
                detail: "disk on fire".into(),
            });
        }
        Ok(st
            .policies
            .iter()
            .filter(|p| p.target() == target)
            .cloned()
            .collect())
    }

    async fn update_policy(&self, policy: &Policy) -> Result<Policy, JournalError> {
        let mut st = self.state.lock().unwrap();
        let slot = st
            .policies
            .iter_mut()
            .find(|p| p.id() == policy.id())
            .ok_or(JournalError::NotFound {
                what: "policy".into(),
            })?;
        if slot.revision() != policy.revision() {
            return Err(JournalError::Conflict {
                what: "policy".into(),
                detail: "revision".into(),
            });
        }
        let mut parts = policy.to_parts();
        parts.revision += 1;
        *slot = Policy::from_parts(parts).unwrap();
        Ok(slot.clone())
    }

    async fn insert_attempt(&self, attempt: &Attempt) -> Result<(), JournalError> {
        push(&self.log, format!("journal.insert({})", attempt.state()));
        let mut st = self.state.lock().unwrap();
        if st.attempts.contains_key(attempt.id()) {
            return Err(JournalError::Conflict {
                what: "attempt".into(),
                detail: "duplicate".into(),
            });
        }
        st.attempts.insert(attempt.id().clone(), attempt.clone());
        let active = st
            .attempts
            .values()
            .filter(|a| a.counts_against_capacity())
            .count() as u32;
        st.high_water = st.high_water.max(active);
        Ok(())
    }

    async fn update_attempt(&self, previous: &Attempt, next: &Attempt) -> Result<(), JournalError> {
        let mut st = self.state.lock().unwrap();
        let stored = st
            .attempts
            .get(previous.id())
            .ok_or(JournalError::NotFound {
                what: "attempt".into(),
            })?;
        if stored != previous {
            return Err(JournalError::Conflict {
                what: "attempt".into(),
                detail: "changed".into(),
            });
        }
        if st.fail_update_to == Some(next.state()) {
            st.fail_update_to = None;
            return Err(JournalError::Unavailable {
                detail: "disk full".into(),
            });
        }
        push(&self.log, format!("journal.update({})", next.state()));
        st.updates += 1;
        st.attempts.insert(next.id().clone(), next.clone());
        Ok(())
    }

    async fn uncleaned_attempts(&self) -> Result<Vec<Attempt>, JournalError> {
        let mut st = self.state.lock().unwrap();
        st.uncleaned_reads += 1;
        Ok(st
            .attempts
            .values()
            .filter(|a| !a.is_cleaned())
            .cloned()
            .collect())
    }

    async fn active_counts(&self) -> Result<ActiveCounts, JournalError> {
        // Let other tasks run between reading and acting, as a real database call would.
        tokio::task::yield_now().await;
        let mut st = self.state.lock().unwrap();
        st.counts_reads += 1;
        let mut counts = ActiveCounts::default();
        for a in st.attempts.values() {
            counts.add(a.policy_id(), a.state(), a.runner_name());
        }
        Ok(counts)
    }

    async fn host_capacity(&self) -> Result<u32, JournalError> {
        tokio::task::yield_now().await;
        let mut st = self.state.lock().unwrap();
        st.capacity_reads += 1;
        Ok(st.capacity)
    }
}

// ---------------------------------------------------------------- github

#[derive(Default)]
pub struct GState {
    pub jobs: Vec<JobDemand>,
    pub is_floor: bool,
    pub runners: BTreeMap<String, RunnerView>,
    pub jit_script: VecDeque<GhError>,
    /// When a scripted JIT error is returned, the queued jobs go away with it.
    pub jobs_vanish_on_jit_error: bool,
    pub next_runner_id: u64,
    pub inventory_error: Option<GhError>,
    pub queued_error: Option<GhError>,
    pub delete_script: VecDeque<DeleteOutcome>,
    pub deletes: Vec<u64>,
    pub jit_calls: u32,
    /// The work folder each JIT request named, in order.
    pub work_folders: Vec<Option<PathBuf>>,
    pub queued_calls: u32,
    /// Runner inventory listings asked for (the charged-request economy).
    pub inventory_calls: u32,
    /// Runners that finish and leave GitHub right after the next inventory read (the race
    /// between reading the inventory and inspecting the process).
    pub vanish_after_inventory: Vec<String>,
    /// Runners GitHub's job listings show running a job (what `runs_job` answers).
    pub running: std::collections::BTreeSet<String>,
    /// Runner names the job listings show with a job (GitHub's word, ahead of the inventory).
    pub runners_with_jobs: std::collections::BTreeSet<String>,
    /// This host joined a pool whose label is [`LABEL`] (so policy 1 is pooled).
    pub pool: Option<FakePool>,
    /// `runner_took_job` calls: (runner, console name, labels).
    pub took: Vec<(String, Option<String>, Vec<String>)>,
    /// What `job_verdict` answers per runner (unknown, so untrusted, when absent).
    pub verdicts: HashMap<String, rm_core::TrustVerdict>,
}

/// The pool's side of placement, in memory: which queued jobs other hosts hold.
#[derive(Debug, Default)]
pub struct FakePool {
    /// Jobs a runner of another host holds: not demand here, never claimable.
    pub held_elsewhere: std::collections::BTreeSet<u64>,
    /// This host's claims: runner name → job.
    pub claims: BTreeMap<String, u64>,
    /// `pool_finish` calls: (runner, ran_job).
    pub finished: Vec<(String, bool)>,
    /// The database does not answer.
    pub unavailable: bool,
    pub pooled_reads: u32,
}

pub struct FakeGitHub {
    pub state: Mutex<GState>,
    log: CallLog,
}

impl FakeGitHub {
    pub fn new(log: CallLog) -> Self {
        FakeGitHub {
            state: Mutex::new(GState {
                next_runner_id: 100,
                ..GState::default()
            }),
            log,
        }
    }

    pub fn set_jobs(&self, n: u64) {
        self.state.lock().unwrap().jobs = (0..n)
            .map(|i| JobDemand {
                job_id: 1000 + i,
                run_id: 1,
                repository: String::new(),
                name: String::new(),
                queued_at_ms: None,
                labels: RunsOn::Labels(vec![LABEL.to_owned()]),
                from_fork: false,
            })
            .collect();
    }

    pub fn list(&self, name: &str, id: u64, busy: bool, status: RunnerStatus) {
        self.state.lock().unwrap().runners.insert(
            name.to_owned(),
            RunnerView {
                id,
                name: name.to_owned(),
                busy,
                status,
            },
        );
    }

    pub fn unlist(&self, name: &str) {
        self.state.lock().unwrap().runners.remove(name);
    }

    pub fn listed(&self, name: &str) -> Option<RunnerView> {
        self.state.lock().unwrap().runners.get(name).cloned()
    }

    pub fn deletes(&self) -> Vec<u64> {
        self.state.lock().unwrap().deletes.clone()
    }

    pub fn inventory_calls(&self) -> u32 {
        self.state.lock().unwrap().inventory_calls
    }

    pub fn jit_calls(&self) -> u32 {
        self.state.lock().unwrap().jit_calls
    }

    /// The demand polls' job listings show `name` running a job (or no longer).
    pub fn set_running(&self, name: &str, on: bool) {
        let mut st = self.state.lock().unwrap();
        if on {
            st.running.insert(name.to_owned());
        } else {
            st.running.remove(name);
        }
    }

    pub fn set_unreachable(&self, on: bool) {
        let err = on.then(|| GhError::Unreachable {
            detail: "no route".into(),
        });
        let mut st = self.state.lock().unwrap();
        st.inventory_error = err.clone();
        st.queued_error = err;
    }
}

impl GitHubPort for FakeGitHub {
    async fn queued_jobs(&self, _target: &Target) -> Result<DemandSnapshot, GhError> {
        let mut st = self.state.lock().unwrap();
        st.queued_calls += 1;
        if let Some(e) = &st.queued_error {
            return Err(e.clone());
        }
        Ok(DemandSnapshot {
            jobs: st.jobs.clone(),
            is_floor: st.is_floor,
            runners_with_jobs: st.runners_with_jobs.clone(),
        })
    }

    async fn generate_jit(
        &self,
        _target: &Target,
        runner_name: &str,
        labels: &LabelSet,
        work_folder: Option<&Path>,
    ) -> Result<Jit, GhError> {
        push(&self.log, "github.generate_jit");
        let mut st = self.state.lock().unwrap();
        st.jit_calls += 1;
        st.work_folders.push(work_folder.map(Path::to_path_buf));
        assert!(labels.contains(LABEL), "the policy's labels are sent");
        if let Some(e) = st.jit_script.pop_front() {
            if matches!(e, GhError::Conflict { .. }) {
                // An earlier try got through although its answer was lost.
                st.runners.insert(
                    runner_name.to_owned(),
                    RunnerView {
                        id: 999,
                        name: runner_name.to_owned(),
                        busy: false,
                        status: RunnerStatus::Offline,
                    },
                );
            }
            if st.jobs_vanish_on_jit_error {
                st.jobs.clear();
            }
            return Err(e);
        }
        let id = st.next_runner_id;
        st.next_runner_id += 1;
        st.runners.insert(
            runner_name.to_owned(),
            RunnerView {
                id,
                name: runner_name.to_owned(),
                busy: false,
                status: RunnerStatus::Offline,
            },
        );
        Ok(Jit {
            runner_id: id,
            config: JitSecret::new(format!("jit-secret-{id}")),
        })
    }

    async fn runner_by_name(
        &self,
        _target: &Target,
        name: &str,
    ) -> Result<Option<RunnerView>, GhError> {
        push(&self.log, "github.runner_by_name");
        Ok(self.state.lock().unwrap().runners.get(name).cloned())
    }

    async fn runners(&self, _target: &Target) -> Result<Vec<RunnerView>, GhError> {
        let mut st = self.state.lock().unwrap();
        st.inventory_calls += 1;
        if let Some(e) = &st.inventory_error {
            return Err(e.clone());
        }
        let list = st.runners.values().cloned().collect();
        for name in std::mem::take(&mut st.vanish_after_inventory) {
            st.runners.remove(&name);
        }
        Ok(list)
    }

    fn runs_job(&self, runner_name: &str) -> bool {
        self.state.lock().unwrap().running.contains(runner_name)
    }

    fn runner_took_job(
        &self,
        _target: &Target,
        runner_name: &str,
        job_name: Option<&str>,
        labels: &LabelSet,
        _os: rm_core::Os,
        _arch: rm_core::Arch,
    ) -> bool {
        push(&self.log, format!("github.took_job {runner_name}"));
        self.state.lock().unwrap().took.push((
            runner_name.to_string(),
            job_name.map(str::to_string),
            labels.to_strings(),
        ));
        job_name.is_some()
    }

    async fn runner_job_over(&self, runner_name: &str) {
        push(&self.log, format!("github.job_over {runner_name}"));
    }

    async fn job_verdict(&self, runner_name: &str) -> rm_core::TrustVerdict {
        push(&self.log, format!("github.job_verdict {runner_name}"));
        self.state
            .lock()
            .unwrap()
            .verdicts
            .get(runner_name)
            .cloned()
            .unwrap_or_else(|| rm_core::TrustVerdict::unknown("the fake was told nothing"))
    }

    fn pool_label(&self) -> Option<String> {
        self.state
            .lock()
            .unwrap()
            .pool
            .as_ref()
            .map(|_| LABEL.to_owned())
    }

    async fn pooled_jobs(&self, _target: &Target) -> Result<DemandSnapshot, GhError> {
        let mut st = self.state.lock().unwrap();
        let held = match st.pool.as_mut() {
            Some(pool) => {
                pool.pooled_reads += 1;
                pool.held_elsewhere.clone()
            }
            None => panic!("pooled_jobs asked of a host in no pool"),
        };
        Ok(DemandSnapshot {
            jobs: st
                .jobs
                .iter()
                .filter(|j| !held.contains(&j.job_id))
                .cloned()
                .collect(),
            is_floor: st.is_floor,
            runners_with_jobs: st.runners_with_jobs.clone(),
        })
    }

    async fn pool_claim(
        &self,
        _target: &Target,
        runner_name: &str,
        candidates: &[u64],
    ) -> rm_agent::PoolClaim {
        push(&self.log, "pool.claim");
        let mut st = self.state.lock().unwrap();
        let Some(pool) = st.pool.as_mut() else {
            return rm_agent::PoolClaim::NotPooled;
        };
        if pool.unavailable {
            return rm_agent::PoolClaim::Unavailable {
                detail: "connection refused".into(),
            };
        }
        let free = candidates
            .iter()
            .copied()
            .find(|j| !pool.held_elsewhere.contains(j) && !pool.claims.values().any(|c| c == j));
        match free {
            Some(job_id) => {
                pool.claims.insert(runner_name.to_owned(), job_id);
                rm_agent::PoolClaim::Claimed { job_id }
            }
            None => rm_agent::PoolClaim::NoneLeft,
        }
    }

    async fn pool_finish(&self, _target: &Target, runner_name: &str, ran_job: bool) {
        let mut st = self.state.lock().unwrap();
        if let Some(pool) = st.pool.as_mut() {
            pool.finished.push((runner_name.to_owned(), ran_job));
            if !ran_job {
                pool.claims.remove(runner_name);
            }
        }
    }

    async fn delete_runner(
        &self,
        _target: &Target,
        runner_id: u64,
    ) -> Result<DeleteOutcome, GhError> {
        push(&self.log, "github.delete");
        let mut st = self.state.lock().unwrap();
        st.deletes.push(runner_id);
        if let Some(outcome) = st.delete_script.pop_front() {
            return Ok(outcome);
        }
        let name = st
            .runners
            .iter()
            .find(|(_, v)| v.id == runner_id)
            .map(|(n, _)| n.clone());
        Ok(match name {
            Some(n) => {
                st.runners.remove(&n);
                DeleteOutcome::Deleted
            }
            None => DeleteOutcome::Gone,
        })
    }
}

// ---------------------------------------------------------------- runner host

#[derive(Default)]
pub struct HState {
    pub next_pid: u32,
    pub alive: HashMap<u32, bool>,
    pub by_runtime: HashMap<PathBuf, ProcessIdentity>,
    pub sidecars: HashMap<AttemptId, u64>,
    pub evidence: HashMap<PathBuf, Evidence>,
    /// How processes ended, as the host that started them saw it.
    pub exits: HashMap<u32, rm_core::ProcessExit>,
    pub scrub_script: VecDeque<ScrubError>,
    pub scrubbed: Vec<PathBuf>,
    /// Whether each scrub (in order) asked to keep a persistent workspace.
    pub kept_workspace: Vec<bool>,
    /// The trust each scrub (in order) was told the runner's job had.
    pub scrub_trust: Vec<Option<rm_core::JobTrust>>,
    /// The runners left nothing a verdict decides (no workspace slot, no cache change).
    pub nothing_to_judge: bool,
    /// The persistent workspace claims, in order.
    pub claims: Vec<(AttemptId, rm_core::PolicyId)>,
    pub stops: Vec<ProcessIdentity>,
    pub secrets: Vec<String>,
    /// Whom each runner was spawned for, in order.
    pub spawned_for: Vec<SpawnFor>,
    pub materialize_error: Option<HostError>,
    pub spawn_error: Option<HostError>,
    pub preparing: u32,
    pub max_preparing: u32,
    /// Inspections of a pid left before it is seen dead (a runner that ends by itself).
    pub dies_after: HashMap<u32, u32>,
    /// Materializing moves this clock forward by this much (a slow disk).
    pub materialize_takes: Option<(FakeClock, Duration)>,
    /// What the host checks answer, and how often they were asked.
    pub fitness: Vec<HostCheck>,
    pub fitness_checks: u32,
    /// The job name each runner's console gave.
    pub job_names: HashMap<PathBuf, String>,
}

pub struct FakeHost {
    pub state: Mutex<HState>,
    log: CallLog,
}

impl FakeHost {
    pub fn new(log: CallLog) -> Self {
        FakeHost {
            state: Mutex::new(HState {
                next_pid: 4000,
                ..HState::default()
            }),
            log,
        }
    }

    pub fn dir(id: &AttemptId) -> PathBuf {
        PathBuf::from("/fake/runners").join(id.as_str())
    }

    /// A live runner process in `id`'s runtime directory.
    pub fn run_process(&self, id: &AttemptId) -> ProcessIdentity {
        let mut st = self.state.lock().unwrap();
        st.next_pid += 1;
        let p = ProcessIdentity {
            pid: st.next_pid,
            start_time: 77,
        };
        st.alive.insert(p.pid, true);
        st.by_runtime.insert(Self::dir(id), p);
        p
    }

    pub fn kill(&self, p: ProcessIdentity) {
        self.state.lock().unwrap().alive.insert(p.pid, false);
    }

    /// The process ends as `exit` (seen by the host that started it).
    pub fn end(&self, p: ProcessIdentity, exit: rm_core::ProcessExit) {
        let mut st = self.state.lock().unwrap();
        st.alive.insert(p.pid, false);
        st.exits.insert(p.pid, exit);
    }

    pub fn is_alive(&self, p: ProcessIdentity) -> bool {
        self.state.lock().unwrap().alive.get(&p.pid) == Some(&true)
    }

    /// The runner's console names the job it took.
    pub fn set_job_name(&self, id: &AttemptId, name: &str) {
        self.state
            .lock()
            .unwrap()
            .job_names
            .insert(Self::dir(id), name.to_string());
    }

    pub fn set_evidence(&self, id: &AttemptId, ev: Evidence) {
        self.state
            .lock()
            .unwrap()
            .evidence
            .insert(Self::dir(id), ev);
    }

    pub fn stops(&self) -> Vec<ProcessIdentity> {
        self.state.lock().unwrap().stops.clone()
    }

    pub fn scrubbed(&self) -> Vec<PathBuf> {
        self.state.lock().unwrap().scrubbed.clone()
    }

    pub fn kept_workspace(&self) -> Vec<bool> {
        self.state.lock().unwrap().kept_workspace.clone()
    }
}

impl RunnerHostPort for FakeHost {
    fn runtime_dir(&self, attempt: &AttemptId) -> PathBuf {
        Self::dir(attempt)
    }

    async fn materialize(&self, attempt: &AttemptId) -> Result<PathBuf, HostError> {
        push(&self.log, "host.materialize");
        {
            let mut st = self.state.lock().unwrap();
            if let Some(e) = st.materialize_error.clone() {
                return Err(e);
            }
            st.preparing += 1;
            st.max_preparing = st.max_preparing.max(st.preparing);
            if let Some((clock, d)) = &st.materialize_takes {
                clock.advance(*d);
            }
        }
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        self.state.lock().unwrap().preparing -= 1;
        Ok(Self::dir(attempt))
    }

    async fn claim_workspace(
        &self,
        attempt: &AttemptId,
        policy: rm_core::PolicyId,
    ) -> Result<Option<PathBuf>, HostError> {
        push(&self.log, "host.claim_workspace");
        let mut st = self.state.lock().unwrap();
        st.claims.push((attempt.clone(), policy));
        Ok(Some(PathBuf::from(format!("/ws/{policy}/0/work"))))
    }

    async fn write_sidecar(&self, attempt: &AttemptId, runner_id: u64) -> Result<(), HostError> {
        push(&self.log, "host.write_sidecar");
        self.state
            .lock()
            .unwrap()
            .sidecars
            .insert(attempt.clone(), runner_id);
        Ok(())
    }

    async fn read_sidecar(&self, attempt: &AttemptId) -> Result<Option<u64>, HostError> {
        Ok(self.state.lock().unwrap().sidecars.get(attempt).copied())
    }

    async fn spawn(
        &self,
        runtime: &Path,
        jit: JitSecret,
        spawn_for: &SpawnFor,
    ) -> Result<ProcessIdentity, HostError> {
        push(&self.log, "host.spawn");
        self.state
            .lock()
            .unwrap()
            .spawned_for
            .push(spawn_for.clone());
        let mut st = self.state.lock().unwrap();
        if let Some(e) = st.spawn_error.clone() {
            return Err(e);
        }
        st.secrets.push(jit.expose().to_owned());
        st.next_pid += 1;
        let p = ProcessIdentity {
            pid: st.next_pid,
            start_time: 77,
        };
        st.alive.insert(p.pid, true);
        st.by_runtime.insert(runtime.to_owned(), p);
        Ok(p)
    }

    async fn inspect(&self, process: ProcessIdentity) -> Result<bool, HostError> {
        let mut st = self.state.lock().unwrap();
        if let Some(left) = st.dies_after.get_mut(&process.pid) {
            if *left == 0 {
                st.alive.insert(process.pid, false);
            } else {
                *left -= 1;
            }
        }
        Ok(process.start_time == 77 && st.alive.get(&process.pid) == Some(&true))
    }

    async fn exit_of(&self, process: ProcessIdentity) -> Option<rm_core::ProcessExit> {
        self.state.lock().unwrap().exits.get(&process.pid).copied()
    }

    async fn find_process(&self, runtime: &Path) -> Result<Option<ProcessIdentity>, HostError> {
        let st = self.state.lock().unwrap();
        Ok(st
            .by_runtime
            .get(runtime)
            .copied()
            .filter(|p| st.alive.get(&p.pid) == Some(&true)))
    }

    async fn stop(&self, process: ProcessIdentity, _grace: Duration) -> Result<(), HostError> {
        push(&self.log, "host.stop");
        let mut st = self.state.lock().unwrap();
        st.stops.push(process);
        st.alive.insert(process.pid, false);
        Ok(())
    }

    async fn job_name(&self, runtime: &Path) -> Option<String> {
        self.state.lock().unwrap().job_names.get(runtime).cloned()
    }

    async fn evidence(&self, runtime: &Path) -> Evidence {
        self.state
            .lock()
            .unwrap()
            .evidence
            .get(runtime)
            .copied()
            .unwrap_or(Evidence::None)
    }

    async fn check_fitness(&self) -> Vec<HostCheck> {
        push(&self.log, "host.check_fitness");
        let mut st = self.state.lock().unwrap();
        st.fitness_checks += 1;
        st.fitness.clone()
    }

    async fn needs_verdict(&self, _runtime: &Path) -> bool {
        !self.state.lock().unwrap().nothing_to_judge
    }

    async fn scrub(
        &self,
        runtime: &Path,
        keep_workspace: bool,
        job: Option<rm_core::JobTrust>,
    ) -> Result<(), ScrubError> {
        push(&self.log, "host.scrub");
        let mut st = self.state.lock().unwrap();
        if let Some(e) = st.scrub_script.pop_front() {
            return Err(e);
        }
        st.scrubbed.push(runtime.to_owned());
        st.kept_workspace.push(keep_workspace);
        st.scrub_trust.push(job);
        Ok(())
    }
}

// ---------------------------------------------------------------- harness

pub type Loop = TargetLoop<Arc<FakeJournal>, Arc<FakeGitHub>, Arc<FakeHost>, FakeClock>;

pub struct Harness {
    pub log: CallLog,
    pub journal: Arc<FakeJournal>,
    pub github: Arc<FakeGitHub>,
    pub host: Arc<FakeHost>,
    pub clock: FakeClock,
    pub shared: HostShared,
    pub events: broadcast::Receiver<AgentEvent>,
}

pub fn target() -> Target {
    Target::parse("me/app").unwrap()
}

pub fn t(offset_ms: i64) -> Timestamp {
    Timestamp::from_millis(T0 + offset_ms)
}

impl Harness {
    /// Host capacity 4; policy 1 of `me/app`, active, max 2.
    pub fn new() -> Self {
        let log: CallLog = Arc::default();
        let shared = HostShared::default();
        let h = Harness {
            journal: Arc::new(FakeJournal::new(log.clone(), 4)),
            github: Arc::new(FakeGitHub::new(log.clone())),
            host: Arc::new(FakeHost::new(log.clone())),
            clock: FakeClock::new(t(0)),
            events: shared.subscribe(),
            shared,
            log,
        };
        h.journal
            .add_policy(1, &target(), Some(2), PolicyState::Active);
        h
    }

    /// A loop that reads GitHub's runner inventory on every pass that supervises a runner, so
    /// each decision row sees a fresh view (the inventory economy is tested with
    /// [`Harness::make_loop_with`] and the default refresh).
    pub fn make_loop(&self, target: Target) -> Loop {
        let config = rm_agent::AgentConfig {
            inventory_refresh: Duration::ZERO,
            ..rm_agent::AgentConfig::default()
        };
        self.make_loop_with(target, config)
    }

    pub fn make_loop_with(&self, target: Target, config: rm_agent::AgentConfig) -> Loop {
        TargetLoop::new(
            target,
            Ports {
                journal: self.journal.clone(),
                github: self.github.clone(),
                host: self.host.clone(),
                clock: self.clock.clone(),
            },
            self.shared.clone(),
            config,
            Arc::new(Duration::from_secs(3600)),
        )
    }

    pub fn calls(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn clear_calls(&self) {
        self.log.lock().unwrap().clear();
    }

    /// Every event sent so far (and not yet taken).
    pub fn events(&mut self) -> Vec<EventKind> {
        let mut out = Vec::new();
        while let Ok(e) = self.events.try_recv() {
            out.push(e.kind);
        }
        out
    }

    /// An attempt of policy 1 brought to `state` at `t(0)` through legal events, with a live
    /// process for the process-holding states, stored in the journal.
    pub fn seed(&self, id: &str, state: AttemptState) -> (Attempt, Option<ProcessIdentity>) {
        self.seed_for(id, 1, state)
    }

    pub fn seed_for(
        &self,
        id: &str,
        policy: i64,
        state: AttemptState,
    ) -> (Attempt, Option<ProcessIdentity>) {
        let id = AttemptId::new(id).unwrap();
        let mut a = Attempt::allocate(id.clone(), PolicyId::new(policy), t(0));
        let mut process = None;
        if state != AttemptState::Allocated {
            a.record_jit(55, t(0)).unwrap();
        }
        if matches!(
            state,
            AttemptState::Starting | AttemptState::Idle | AttemptState::Busy
        ) {
            let p = self.host.run_process(&id);
            a.record_started(p, t(0)).unwrap();
            process = Some(p);
        }
        match state {
            AttemptState::Idle => a.observe(Observed::Idle, t(0)).unwrap(),
            AttemptState::Busy => a.observe(Observed::Busy, t(0)).unwrap(),
            _ => {}
        }
        self.journal.put(a.clone());
        (a, process)
    }
}

/// The one attempt in the journal.
pub fn only_attempt(h: &Harness) -> rm_core::Attempt {
    let all = h.journal.attempts();
    assert_eq!(all.len(), 1, "{all:?}");
    all[0].clone()
}

/// Makes policy 1 keep its workspaces between jobs.
pub fn make_persistent(h: &Harness) {
    let mut st = h.journal.state.lock().unwrap();
    let p = st
        .policies
        .iter_mut()
        .find(|p| p.id() == rm_core::PolicyId::new(1))
        .unwrap();
    p.set_workspace_mode(rm_core::WorkspaceMode::Persistent);
}
