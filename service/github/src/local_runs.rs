//! What this host's own runners tell the demand polls, so that a job costs GitHub about four
//! charged requests: the run appearing in the `queued` list, its jobs listed, the JIT
//! registration, and its jobs listed once more when our runner's job ends.
//!
//! The `in_progress` run list changes every time a run starts or ends, so reading it on every
//! poll charged two or three requests per job even when all it showed were runs our own
//! runners were busy with. Those runs hold nothing for demand: every job of theirs was seen
//! queued and is now running on a runner of ours (or done), and a run gains a job only when
//! one of its jobs ends (`needs`), which for our runs is an event this host sees first. So:
//!
//! - A runner that took a job says which, by its console's "Running job: <name>" line, matched
//!   to the one known queued job of that name its labels can take ([`LocalRuns::took_job`]).
//!   That is provisional (names are the workflow author's); when its job ends, the run's jobs
//!   are listed again and GitHub's word replaces it ([`GitHubClient::runner_job_over`]), before
//!   the runner is concluded, so the fork guard and the failure notices read GitHub's answer.
//!   That listing also shows a job the run queued next; the run is watched a little longer
//!   (conditional listings, free while nothing changes) for one that comes late.
//! - The `in_progress` list is read only while something there may concern us: a run we know
//!   that our runners do not account for (jobs of other runners, or still queued), a runner of
//!   ours whose job is not known, a run whose end we could not confirm, and in any case (a
//!   run whose first jobs others took before any poll saw it queued, e.g. a GitHub-hosted job
//!   that a job for this host `needs`) every [`QUIET_BACKSTOP`] while none of our runners is
//!   busy and no run we know is in progress (the list is then most likely back to a state read
//!   before: a free `304`), and every [`BACKSTOP`] regardless.
//!
//! [`GitHubClient::runner_job_over`]: crate::GitHubClient::runner_job_over

use crate::models::JobItem;
use rm_core::{Arch, LabelSet, Os, Target};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The longest the `in_progress` list goes unread.
pub const BACKSTOP: Duration = Duration::from_secs(120);
/// How long it goes unread while this host is quiet there.
pub const QUIET_BACKSTOP: Duration = Duration::from_secs(15);
/// How long a run whose job of ours ended is listed on its repository's polls (free while
/// unchanged) for a job it queues next, and on how many polls at most: GitHub queues a job
/// whose `needs` are met within a few seconds, and every request counts against the planned
/// poll interval.
pub const WATCH: Duration = Duration::from_secs(10);
pub const WATCH_POLLS: u32 = 3;
/// Most runs remembered (the oldest go first); runs leave when a poll of both lists no longer
/// shows them.
const CAPACITY: usize = 4096;

/// A run whose jobs a listing showed.
#[derive(Clone)]
struct KnownRun {
    repo: String,
    from_fork: bool,
    event: Option<String>,
    jobs: Vec<JobItem>,
    truncated: bool,
    /// In the `queued` list as last read.
    queued: bool,
    /// Listed on polls until then (a job of ours in it ended), at most `watch_polls` more.
    watch_until: Option<Instant>,
    watch_polls: u32,
    /// Every job ended and the watch is over: nothing more is expected of it.
    done: bool,
    order: u64,
}

/// A runner of ours that took a job.
#[derive(Clone)]
struct Busy {
    /// `owner/repo`, or the organization for an organization target.
    scope: String,
    /// (run, job) it took, once known.
    job: Option<(u64, u64)>,
}

#[derive(Default)]
struct Watch {
    polled_at: Option<Instant>,
    /// Read it on the next poll (a runner's end could not be confirmed).
    due: bool,
}

#[derive(Default)]
struct State {
    runs: HashMap<u64, KnownRun>,
    busy: HashMap<String, Busy>,
    repos: HashMap<String, Watch>,
    next: u64,
}

#[derive(Default)]
pub(crate) struct LocalRuns {
    state: Mutex<State>,
}

/// A job our runner took, as attributed.
pub(crate) struct Taken {
    pub run_id: u64,
    pub from_fork: bool,
    pub job: JobItem,
    pub repo: String,
}

fn in_scope(scope: &str, repo: &str) -> bool {
    if scope.contains('/') {
        scope.eq_ignore_ascii_case(repo)
    } else {
        repo.split_once('/')
            .is_some_and(|(owner, _)| owner.eq_ignore_ascii_case(scope))
    }
}

/// `owner/repo` for a repository target, the organization otherwise.
pub(crate) fn scope_of(target: &Target) -> String {
    match target {
        Target::Repository { owner, name } => format!("{}/{}", owner.as_str(), name.as_str()),
        Target::Organization { org } => org.as_str().to_string(),
    }
}

impl LocalRuns {
    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// A listing of `run_id`'s jobs.
    pub(crate) fn listed(
        &self,
        run_id: u64,
        repo: &str,
        from_fork: bool,
        event: Option<String>,
        jobs: &[JobItem],
        truncated: bool,
    ) {
        let mut st = self.lock();
        let order = st.next;
        st.next += 1;
        let entry = st.runs.entry(run_id).or_insert_with(|| KnownRun {
            repo: repo.to_string(),
            from_fork,
            event: None,
            jobs: Vec::new(),
            truncated,
            queued: false,
            watch_until: None,
            watch_polls: 0,
            done: false,
            order,
        });
        entry.from_fork = from_fork;
        if event.is_some() {
            entry.event = event;
        }
        entry.jobs = jobs.to_vec();
        entry.truncated = truncated;
        if jobs.iter().any(|j| j.status != "completed") {
            entry.done = false;
        }
        while st.runs.len() > CAPACITY {
            let Some(oldest) = st.runs.iter().min_by_key(|(_, r)| r.order).map(|(k, _)| *k) else {
                break;
            };
            st.runs.remove(&oldest);
        }
    }

    /// Whether this poll of `repo` must read the `in_progress` list (see the module).
    pub(crate) fn in_progress_due(&self, repo: &str, now: Instant) -> bool {
        let st = self.lock();
        let watch = st.repos.get(repo);
        let Some(polled_at) = watch.and_then(|w| w.polled_at) else {
            return true;
        };
        if watch.is_some_and(|w| w.due) {
            return true;
        }
        let since = now.saturating_duration_since(polled_at);
        let quiet = !st.busy.values().any(|b| in_scope(&b.scope, repo))
            && st
                .runs
                .values()
                .all(|r| r.repo != repo || r.queued || r.done);
        if since >= BACKSTOP || (quiet && since >= QUIET_BACKSTOP) {
            return true;
        }
        if st
            .busy
            .values()
            .any(|b| b.job.is_none() && in_scope(&b.scope, repo))
        {
            return true;
        }
        st.runs
            .iter()
            // A watched run is listed directly meanwhile.
            .filter(|(_, r)| r.repo == repo && !r.queued && !r.done && !watching(r, now))
            .any(|(id, r)| !explained(&st, *id, r, now))
    }

    /// The `queued` list of `repo` as just read (`listed`: its runs).
    pub(crate) fn queued_listed(&self, repo: &str, listed: &BTreeSet<u64>) {
        let mut st = self.lock();
        for (id, r) in st.runs.iter_mut() {
            if r.repo == repo {
                r.queued = listed.contains(id);
            }
        }
    }

    /// Both lists of `repo` were just read in full (`listed`: their runs): runs in neither are
    /// over.
    /// `complete`: no page cap cut them short (else nothing is forgotten).
    pub(crate) fn both_listed(
        &self,
        repo: &str,
        listed: &BTreeSet<u64>,
        complete: bool,
        now: Instant,
    ) {
        let mut st = self.lock();
        if complete {
            st.runs
                .retain(|id, r| r.repo != repo || listed.contains(id));
        }
        let w = st.repos.entry(repo.to_string()).or_default();
        w.polled_at = Some(now);
        w.due = false;
    }

    /// Whether a run in the `in_progress` list needs no listing: our runners account for it.
    pub(crate) fn accounted_for(&self, run_id: u64, now: Instant) -> bool {
        let st = self.lock();
        st.runs
            .get(&run_id)
            .is_some_and(|r| explained(&st, run_id, r, now))
    }

    /// Runs of `repo` to list on this poll because a job of ours in them just ended.
    /// `defer`: this poll lists new runs, whose jobs wait for it to end: the watch lets it go
    /// by (nothing counted), except for its one look when it ran out unlisted.
    pub(crate) fn watched(
        &self,
        repo: &str,
        now: Instant,
        defer: bool,
    ) -> Vec<(u64, bool, Option<String>)> {
        let mut st = self.lock();
        let mut out = Vec::new();
        for (id, r) in st.runs.iter_mut() {
            if r.repo != repo {
                continue;
            }
            match r.watch_until {
                Some(until) if now < until && r.watch_polls > 0 => {
                    if defer {
                        continue;
                    }
                    r.watch_polls -= 1;
                    out.push((*id, r.from_fork, r.event.clone()));
                    if r.watch_polls == 0 {
                        // The last look: this poll's listing says whether anything is left.
                        r.watch_until = None;
                        r.done = r.jobs.iter().all(|j| j.status == "completed");
                    }
                }
                Some(_) => {
                    r.watch_until = None;
                    r.done = r.jobs.iter().all(|j| j.status == "completed");
                    if r.watch_polls == WATCH_POLLS {
                        // Deferred all along: one look still, as the last.
                        out.push((*id, r.from_fork, r.event.clone()));
                    }
                }
                None => {}
            }
        }
        out
    }

    /// `runner` (a runner of ours, of `target`) took a job whose display name is `name`:
    /// attributed when exactly one known queued job of that name its labels can take is not
    /// already another runner's. Without it, the `in_progress` list is read until GitHub's
    /// listings say.
    pub(crate) fn took_job(
        &self,
        target: &Target,
        runner: &str,
        name: &str,
        labels: &LabelSet,
        os: Os,
        arch: Arch,
    ) -> Option<Taken> {
        let scope = scope_of(target);
        let mut st = self.lock();
        if let Some(b) = st.busy.get(runner) {
            if b.job.is_some() {
                return None;
            }
        }
        let taken: BTreeSet<u64> = st
            .busy
            .values()
            .filter_map(|b| b.job.map(|j| j.1))
            .collect();
        let mut candidates = st.runs.iter().flat_map(|(id, r)| {
            let fits = in_scope(&scope, &r.repo);
            r.jobs
                .iter()
                .filter(move |j| {
                    fits && j.status == "queued"
                        && j.runner_name.is_none()
                        && j.name.as_deref() == Some(name)
                        && rm_core::job_matches_runner(labels, os, arch, &j.labels)
                })
                .map(move |j| (*id, r, j))
        });
        let first = candidates.next();
        let unique = first
            .filter(|(_, _, j)| !taken.contains(&j.id))
            .filter(|_| candidates.next().is_none());
        let found = unique.map(|(id, r, j)| Taken {
            run_id: id,
            from_fork: r.from_fork,
            job: j.clone(),
            repo: r.repo.clone(),
        });
        st.busy.insert(
            runner.to_string(),
            Busy {
                scope,
                job: found.as_ref().map(|t| (t.run_id, t.job.id)),
            },
        );
        found
    }

    /// `runner`'s job ended: forgets it as busy and returns the run it was attributed to.
    pub(crate) fn job_over(&self, runner: &str) -> (Option<u64>, Option<String>) {
        let mut st = self.lock();
        match st.busy.remove(runner) {
            Some(b) => (b.job.map(|j| j.0), Some(b.scope)),
            None => (None, None),
        }
    }

    /// The repository of a known run, and whether it comes from a fork.
    pub(crate) fn run_info(&self, run_id: u64) -> Option<(String, bool, Option<String>)> {
        self.lock()
            .runs
            .get(&run_id)
            .map(|r| (r.repo.clone(), r.from_fork, r.event.clone()))
    }

    /// A runner whose job GitHub's listings already named: busy with it.
    pub(crate) fn busy_with(&self, target: &Target, runner: &str, run_id: u64, job_id: u64) {
        self.lock().busy.insert(
            runner.to_string(),
            Busy {
                scope: scope_of(target),
                job: Some((run_id, job_id)),
            },
        );
    }

    /// GitHub's listings named `runner` on a job: a busy runner of ours is attributed to it.
    pub(crate) fn named(&self, runner: &str, run_id: u64, job_id: u64) {
        if let Some(b) = self.lock().busy.get_mut(runner) {
            b.job = Some((run_id, job_id));
        }
    }

    /// After the listing at a job's end: the run is watched for a job it queues next.
    pub(crate) fn watch(&self, run_id: u64, now: Instant) {
        if let Some(r) = self.lock().runs.get_mut(&run_id) {
            r.watch_until = Some(now + WATCH);
            r.watch_polls = WATCH_POLLS;
            r.done = false;
        }
    }

    /// The `in_progress` list of every repository in `scope` is read on their next poll.
    pub(crate) fn read_in_progress_next(&self, scope: &str) {
        let mut st = self.lock();
        let repos: Vec<String> = st
            .runs
            .values()
            .map(|r| r.repo.clone())
            .chain(st.repos.keys().cloned())
            .filter(|r| in_scope(scope, r))
            .collect();
        for repo in repos {
            st.repos.entry(repo).or_default().due = true;
        }
    }
}

fn watching(r: &KnownRun, now: Instant) -> bool {
    r.watch_until.is_some_and(|u| now < u) && r.watch_polls > 0
}

/// Every job of the run is done or running on a live runner of ours (at least one is), it is
/// not watched, and its listing was whole.
fn explained(st: &State, run_id: u64, r: &KnownRun, now: Instant) -> bool {
    if r.truncated || watching(r, now) {
        return false;
    }
    let ours: BTreeSet<u64> = st
        .busy
        .values()
        .filter_map(|b| b.job.filter(|j| j.0 == run_id).map(|j| j.1))
        .collect();
    let live_names: BTreeSet<&str> = st.busy.keys().map(String::as_str).collect();
    let mut any_ours = false;
    for j in &r.jobs {
        let mine = ours.contains(&j.id)
            || j.runner_name
                .as_deref()
                .is_some_and(|n| live_names.contains(n));
        any_ours |= mine;
        if !mine && j.status != "completed" {
            return false;
        }
    }
    any_ours
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, name: &str, status: &str) -> JobItem {
        JobItem {
            id,
            run_id: 7,
            status: status.into(),
            name: Some(name.into()),
            labels: vec!["rm-a-linux-x64".into()],
            created_at: None,
            runner_name: None,
            html_url: None,
            workflow_name: None,
        }
    }

    fn target() -> Target {
        Target::parse("o/r").unwrap()
    }

    fn labels() -> LabelSet {
        LabelSet::parse(["rm-a-linux-x64"]).unwrap()
    }

    /// A run of one job our runner took, after a poll of both lists at `t0`.
    fn busy_run(t0: Instant) -> LocalRuns {
        let l = LocalRuns::default();
        l.listed(7, "o/r", false, None, &[job(70, "build", "queued")], false);
        l.both_listed("o/r", &BTreeSet::from([7]), true, t0);
        l.queued_listed("o/r", &BTreeSet::new());
        assert!(l
            .took_job(&target(), "rm-1", "build", &labels(), Os::Linux, Arch::X64)
            .is_some());
        l
    }

    /// [`busy_run`] whose runner's job ended: its run listed once more (the job completed)
    /// and watched from `t0`.
    fn watched_after_its_job(t0: Instant) -> LocalRuns {
        let l = busy_run(t0);
        l.job_over("rm-1");
        l.listed(
            7,
            "o/r",
            false,
            None,
            &[job(70, "build", "completed")],
            false,
        );
        l.watch(7, t0);
        l
    }

    #[test]
    fn a_run_our_runner_accounts_for_needs_no_read_until_the_backstop() {
        let t0 = Instant::now();
        let l = busy_run(t0);
        assert!(!l.in_progress_due("o/r", t0 + Duration::from_secs(1)));
        assert!(
            !l.in_progress_due("o/r", t0 + QUIET_BACKSTOP),
            "busy: the quiet backstop does not apply"
        );
        assert!(!l.in_progress_due("o/r", t0 + BACKSTOP - Duration::from_millis(1)));
        assert!(l.in_progress_due("o/r", t0 + BACKSTOP));
        assert!(l.accounted_for(7, t0));
    }

    #[test]
    fn the_backstop_reads_at_a_quiet_moment() {
        let t0 = Instant::now();
        let l = watched_after_its_job(t0);
        for i in 1..=WATCH_POLLS {
            l.watched("o/r", t0 + Duration::from_secs(u64::from(i)), false);
        }
        assert!(!l.in_progress_due("o/r", t0 + QUIET_BACKSTOP - Duration::from_millis(1)));
        assert!(l.in_progress_due("o/r", t0 + QUIET_BACKSTOP));
    }

    #[test]
    fn its_job_over_the_run_is_watched_then_left_alone_once_done() {
        let t0 = Instant::now();
        let l = busy_run(t0);
        assert_eq!(l.job_over("rm-1"), (Some(7), Some("o/r".into())));
        l.listed(
            7,
            "o/r",
            false,
            None,
            &[job(70, "build", "completed")],
            false,
        );
        l.watch(7, t0);
        assert_eq!(
            l.watched("o/r", t0 + Duration::from_secs(1), false).len(),
            1
        );
        assert!(!l.in_progress_due("o/r", t0 + Duration::from_secs(1)));
        assert_eq!(
            l.watched("o/r", t0 + Duration::from_secs(2), false).len(),
            1
        );
        assert_eq!(
            l.watched("o/r", t0 + Duration::from_secs(3), false).len(),
            1
        );
        assert!(
            l.watched("o/r", t0 + Duration::from_secs(4), false)
                .is_empty(),
            "{WATCH_POLLS} polls at most"
        );
        // The watch ends with every job done: nothing more is expected of it.
        assert!(l.watched("o/r", t0 + WATCH, false).is_empty());
        assert!(!l.in_progress_due("o/r", t0 + WATCH));
    }

    #[test]
    fn a_watch_that_ends_with_a_job_still_queued_reads_the_list() {
        let t0 = Instant::now();
        let l = busy_run(t0);
        l.job_over("rm-1");
        l.listed(
            7,
            "o/r",
            false,
            None,
            &[job(70, "build", "completed"), job(71, "test", "queued")],
            false,
        );
        l.watch(7, t0);
        assert_eq!(
            l.watched("o/r", t0 + WATCH, false).len(),
            1,
            "a watch never listed gets its one look"
        );
        assert!(l.watched("o/r", t0 + WATCH, false).is_empty());
        assert!(l.in_progress_due("o/r", t0 + WATCH));
    }

    #[test]
    fn a_poll_listing_new_runs_lets_the_watch_go_by_without_counting() {
        let t0 = Instant::now();
        let l = watched_after_its_job(t0);
        for i in 1..=5 {
            assert!(
                l.watched("o/r", t0 + Duration::from_secs(i), true)
                    .is_empty(),
                "deferred"
            );
        }
        for i in 6..6 + u64::from(WATCH_POLLS) {
            assert_eq!(
                l.watched("o/r", t0 + Duration::from_secs(i), false).len(),
                1,
                "every poll of the watch is still there"
            );
        }
        assert!(l
            .watched("o/r", t0 + Duration::from_secs(9), false)
            .is_empty());
        // Deferred until it ran out: one look all the same.
        let l = busy_run(t0);
        l.job_over("rm-1");
        l.watch(7, t0);
        assert!(l
            .watched("o/r", t0 + Duration::from_secs(1), true)
            .is_empty());
        assert_eq!(l.watched("o/r", t0 + WATCH, true).len(), 1);
        assert!(l.watched("o/r", t0 + WATCH, true).is_empty());
    }

    #[test]
    fn an_unattributed_busy_runner_keeps_the_list_read() {
        let t0 = Instant::now();
        let l = busy_run(t0);
        assert!(l
            .took_job(&target(), "rm-2", "other", &labels(), Os::Linux, Arch::X64)
            .is_none());
        assert!(l.in_progress_due("o/r", t0 + Duration::from_secs(1)));
        l.named("rm-2", 8, 80);
        assert!(!l.in_progress_due("o/r", t0 + Duration::from_secs(1)));
    }

    #[test]
    fn a_job_whose_labels_the_runner_lacks_is_no_candidate() {
        let l = LocalRuns::default();
        let mut j = job(70, "build", "queued");
        j.labels = vec!["gpu".into()];
        l.listed(7, "o/r", false, None, &[j], false);
        assert!(l
            .took_job(&target(), "rm-1", "build", &labels(), Os::Linux, Arch::X64)
            .is_none());
    }

    #[test]
    fn an_organization_scope_covers_its_repositories_only() {
        assert!(in_scope("Team", "team/app"));
        assert!(!in_scope("team", "teams/app"));
        assert!(in_scope("o/r", "O/R"));
        assert!(!in_scope("o/r", "o/rr"));
    }
}
