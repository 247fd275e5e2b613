//! Placement through a pool of hosts: the GitHub adapter's pooled demand, claims and finishes
//! over one host's connection to the pool's PostgreSQL ([`rm_pool::PoolStore`]).
//!
//! One host per target reads GitHub's queue (the reader, by lease) and publishes it; the others
//! act on what it published, less the jobs other hosts' runners are coming for. While the
//! database does not answer, the queue is read from GitHub directly (so `why` still lists the
//! jobs) but no claim can be had: pooled runners start nowhere rather than everywhere. The
//! connection is re-made with a doubling pause; a runner's end that could not be told is kept
//! and told once the database answers again.

use rm_agent::{DemandSnapshot, PoolClaim};
use rm_core::{JobDemand, RunsOn, Target};
use rm_github::{GitHubClient, RunnerJob};
use rm_pool::{Claim, News, PoolError, PoolHost, PoolStore, PoolUrl, Running, StoreSettings};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The first pause after a failed connection; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(30);

/// How this host joins the pool.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub url: PoolUrl,
    pub password: Option<SecretString>,
    /// The label jobs ask for to run on any host of the pool.
    pub label: String,
    pub settings: StoreSettings,
}

/// Whether the pool's database answers, for status and the tray.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolHealth {
    /// Not asked yet.
    Connecting,
    Connected,
    /// The last try failed; `message` names what to do (nothing, for a database that is just
    /// restarting: it resumes by itself).
    Unreachable {
        message: String,
        since: chrono::DateTime<chrono::Utc>,
        /// The database answered and refused this host (a password changed, a certificate, a
        /// newer schema): a person must act; it is still asked again, with the pause.
        refused: bool,
    },
}

/// What the pool looked like at the last heartbeat.
#[derive(Debug, Clone, Default)]
pub struct PoolView {
    pub hosts: Vec<PoolHost>,
    pub claims: Vec<Claim>,
}

struct Retry {
    failures: u32,
    next_try: Option<Instant>,
    last: String,
}

/// One host's link to the pool.
pub struct Pool {
    config: PoolConfig,
    store: tokio::sync::Mutex<Option<PoolStore>>,
    retry: Mutex<Retry>,
    health: Mutex<PoolHealth>,
    /// Runner ends the database has not heard of yet: (runner, ran_job).
    pending: Mutex<Vec<(String, bool)>>,
    view: Mutex<PoolView>,
    /// The targets other hosts' readers left jobs unclaimed on (see [`rm_pool::news`]).
    news: Arc<News>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("label", &self.config.label)
            .field("address", &self.config.url.address())
            .field("host_id", &self.config.settings.host_id)
            .finish_non_exhaustive()
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Pool {
    pub fn new(mut config: PoolConfig) -> Pool {
        // One listener across every connection this host makes to the pool.
        let news = Arc::new(News::new(config.settings.host_id.clone()));
        config.settings.news = Some(Arc::clone(&news));
        Pool {
            news,
            config,
            store: tokio::sync::Mutex::new(None),
            retry: Mutex::new(Retry {
                failures: 0,
                next_try: None,
                last: String::new(),
            }),
            health: Mutex::new(PoolHealth::Connecting),
            pending: Mutex::new(Vec::new()),
            view: Mutex::new(PoolView::default()),
        }
    }

    pub fn label(&self) -> &str {
        &self.config.label
    }

    pub fn host_id(&self) -> &str {
        &self.config.settings.host_id
    }

    /// `host:port`, never the password.
    pub fn address(&self) -> String {
        self.config.url.address()
    }

    pub fn health(&self) -> PoolHealth {
        locked(&self.health).clone()
    }

    pub fn view(&self) -> PoolView {
        locked(&self.view).clone()
    }

    /// The targets with queued jobs no host claimed, as the other hosts' readers publish
    /// them: a host with room looks at once rather than at its next poll.
    pub fn news(&self) -> Arc<News> {
        Arc::clone(&self.news)
    }

    /// A connected store, connecting first when there is none (not before the pause after a
    /// failure has passed: a database that is down is not asked on every pass).
    async fn connected(&self) -> Result<tokio::sync::MutexGuard<'_, Option<PoolStore>>, PoolError> {
        let mut guard = self.store.lock().await;
        if guard.as_ref().is_some_and(|s| !s.is_closed()) {
            return Ok(guard);
        }
        *guard = None;
        {
            let retry = locked(&self.retry);
            if retry.next_try.is_some_and(|t| Instant::now() < t) {
                return Err(PoolError::Unreachable {
                    address: self.address(),
                    detail: retry.last.clone(),
                });
            }
        }
        match PoolStore::connect(
            &self.config.url,
            self.config.password.as_ref(),
            self.config.settings.clone(),
        )
        .await
        {
            Ok(store) => {
                *guard = Some(store);
                self.note_ok();
                Ok(guard)
            }
            Err(e) => {
                self.note_failure(&e);
                Err(e)
            }
        }
    }

    fn note_ok(&self) {
        let was_down = {
            let mut retry = locked(&self.retry);
            let was = retry.failures > 0;
            retry.failures = 0;
            retry.next_try = None;
            was
        };
        if was_down {
            tracing::info!(address = %self.address(), "the pool database answers again");
        }
        *locked(&self.health) = PoolHealth::Connected;
    }

    fn note_failure(&self, e: &PoolError) {
        let first = {
            let mut retry = locked(&self.retry);
            retry.failures = retry.failures.saturating_add(1);
            let pause = FIRST_RETRY
                .saturating_mul(1 << retry.failures.saturating_sub(1).min(5))
                .min(MAX_RETRY);
            retry.next_try = Some(Instant::now() + pause);
            retry.last = e.to_string();
            retry.failures == 1
        };
        if first {
            tracing::warn!(error = %e, "the pool database does not answer: pooled runners wait on this host");
        }
        let mut health = locked(&self.health);
        let since = match &*health {
            PoolHealth::Unreachable { since, .. } => *since,
            _ => chrono::Utc::now(),
        };
        *health = PoolHealth::Unreachable {
            message: e.to_string(),
            since,
            refused: !e.is_unreachable(),
        };
    }

    /// After a statement failed: a lost connection is made again (after the pause).
    fn after_error(&self, guard: &mut Option<PoolStore>, e: &PoolError) {
        if e.is_unreachable() || guard.as_ref().is_some_and(PoolStore::is_closed) {
            *guard = None;
            self.note_failure(e);
        }
    }

    /// Renews this host's lease with what it can take and what its runners run, tells the
    /// runner ends the database missed, and refreshes the pool's view for status. Called
    /// every third of the lease.
    pub async fn heartbeat(
        &self,
        capacity: u32,
        free: u32,
        running: Option<&[Running]>,
    ) -> Result<(), PoolError> {
        let mut guard = self.connected().await?;
        let Some(store) = guard.as_mut() else {
            return Ok(());
        };
        let result = async {
            // The missed ends first: a claim whose runner ran a job is marked so before the
            // heartbeat, which drops claims without a runner, could take it for one.
            let pending = std::mem::take(&mut *locked(&self.pending));
            for (i, (runner, ran_job)) in pending.iter().enumerate() {
                if let Err(e) = store.finish(runner, *ran_job).await {
                    locked(&self.pending).extend(pending[i..].iter().cloned());
                    return Err(e);
                }
            }
            store
                .heartbeat(&self.config.label, capacity, free, running)
                .await?;
            let view = PoolView {
                hosts: store.hosts().await?,
                claims: store.claims().await?,
            };
            *locked(&self.view) = view;
            Ok(())
        }
        .await;
        if let Err(e) = &result {
            self.after_error(&mut guard, e);
        }
        result
    }

    /// Leaves the pool: claims, reader leases and this host's row go at once.
    pub async fn leave(&self) -> Result<(), PoolError> {
        let mut guard = self.connected().await?;
        let result = match guard.as_mut() {
            Some(store) => store.leave().await,
            None => Ok(()),
        };
        *guard = None;
        result
    }

    /// The target's queue as the pool sees it: read from GitHub by `read` and published when
    /// this host is the target's reader, else what the reader published; either way less the
    /// jobs other hosts' runners are coming for. Without the database, `read` alone. The
    /// reader also publishes the jobs `client` saw runners take, and the others learn them
    /// into their `client`, so every host knows what its runners run.
    pub async fn pooled_jobs<F, Fut, E>(
        &self,
        target: &Target,
        client: &GitHubClient,
        read: F,
    ) -> Result<DemandSnapshot, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<DemandSnapshot, E>>,
    {
        let key = target.to_string();
        let mut guard = match self.connected().await {
            Ok(g) => g,
            Err(_) => return read().await,
        };
        let Some(store) = guard.as_mut() else {
            return read().await;
        };
        let leads = match store.lead(&key).await {
            Ok(l) => l,
            Err(e) => {
                self.after_error(&mut guard, &e);
                drop(guard);
                return read().await;
            }
        };
        if leads {
            // The connection is not held while GitHub answers: this host's claims for other
            // targets go on meanwhile (the reader's lease keeps the others from publishing).
            drop(guard);
            let snapshot = read().await?;
            let queued: Vec<u64> = snapshot.jobs.iter().map(|j| j.job_id).collect();
            let assigned: Vec<String> = snapshot.runners_with_jobs.iter().cloned().collect();
            let taken: Vec<(String, RunnerJob)> = snapshot
                .runners_with_jobs
                .iter()
                .filter_map(|r| client.job_of_runner(r).map(|j| (r.clone(), j)))
                .collect();
            let text = encode(&snapshot, &taken);
            let mut guard = match self.connected().await {
                Ok(g) => g,
                // Not published: the others read the previous queue once more.
                Err(_) => return Ok(snapshot),
            };
            let Some(store) = guard.as_mut() else {
                return Ok(snapshot);
            };
            let elsewhere = async {
                store.publish(&key, &text, &queued, &assigned).await?;
                store
                    .published(&key)
                    .await
                    .map(|p| p.map(|p| p.claimed_elsewhere).unwrap_or_default())
            }
            .await;
            return Ok(match elsewhere {
                Ok(elsewhere) => without(snapshot, &elsewhere),
                Err(e) => {
                    self.after_error(&mut guard, &e);
                    snapshot
                }
            });
        }
        match store.published(&key).await {
            Ok(Some(published)) => match decode(&published.snapshot) {
                Some((snapshot, taken)) => {
                    for (runner, job) in taken {
                        client.learn_runner_job(&runner, job);
                    }
                    Ok(without(snapshot, &published.claimed_elsewhere))
                }
                None => {
                    tracing::warn!(gh_target = %target, "the pool's published queue is unreadable: reading GitHub");
                    drop(guard);
                    read().await
                }
            },
            // Nothing published yet (the reader has not read it): ask GitHub this once.
            Ok(None) => {
                drop(guard);
                read().await
            }
            Err(e) => {
                self.after_error(&mut guard, &e);
                drop(guard);
                read().await
            }
        }
    }

    /// A claim for `runner` on one of `candidates`.
    pub async fn claim(&self, target: &Target, runner: &str, candidates: &[u64]) -> PoolClaim {
        let mut guard = match self.connected().await {
            Ok(g) => g,
            Err(e) => return PoolClaim::Unavailable { detail: short(&e) },
        };
        let Some(store) = guard.as_mut() else {
            return PoolClaim::Unavailable {
                detail: "not connected".into(),
            };
        };
        match store.claim(&target.to_string(), runner, candidates).await {
            Ok(Some(job_id)) => PoolClaim::Claimed { job_id },
            Ok(None) => PoolClaim::NoneLeft,
            Err(e) => {
                self.after_error(&mut guard, &e);
                PoolClaim::Unavailable { detail: short(&e) }
            }
        }
    }

    /// `runner` ended; kept for the next heartbeat when the database cannot be told now.
    pub async fn finish(&self, runner: &str, ran_job: bool) {
        let told = match self.connected().await {
            Ok(mut guard) => match guard.as_mut() {
                Some(store) => match store.finish(runner, ran_job).await {
                    Ok(()) => true,
                    Err(e) => {
                        self.after_error(&mut guard, &e);
                        false
                    }
                },
                None => false,
            },
            Err(_) => false,
        };
        if !told {
            locked(&self.pending).push((runner.to_owned(), ran_job));
        }
    }
}

/// The error in a few words for `why` (the full text, with the fix, is in status).
fn short(e: &PoolError) -> String {
    match e {
        PoolError::Unreachable { detail, .. } => detail.clone(),
        other => other.to_string(),
    }
}

/// `snapshot` less the jobs in `elsewhere`.
fn without(mut snapshot: DemandSnapshot, elsewhere: &[u64]) -> DemandSnapshot {
    if !elsewhere.is_empty() {
        let held: BTreeSet<u64> = elsewhere.iter().copied().collect();
        snapshot.jobs.retain(|j| !held.contains(&j.job_id));
    }
    snapshot
}

/// The queue as the reader publishes it (a mirror of the agent's types: they stay free of
/// serialisation, and this format is the pool's, versioned with its schema).
#[derive(Serialize, Deserialize)]
struct Published {
    jobs: Vec<PublishedJob>,
    is_floor: bool,
    runners_with_jobs: Vec<String>,
    /// The job each of `runners_with_jobs` took, where the reader's listings showed it.
    #[serde(default)]
    taken: Vec<PublishedTaken>,
}

#[derive(Serialize, Deserialize)]
struct PublishedTaken {
    runner: String,
    job_id: u64,
    run_id: u64,
    name: Option<String>,
    repository: String,
    workflow_name: Option<String>,
    html_url: Option<String>,
    status: String,
    from_fork: bool,
}

#[derive(Serialize, Deserialize)]
struct PublishedJob {
    job_id: u64,
    run_id: u64,
    repository: String,
    name: String,
    queued_at_ms: Option<i64>,
    /// `runs-on` as labels, or `None` with `raw` when it could not be read as labels.
    labels: Option<Vec<String>>,
    raw: Option<String>,
    from_fork: bool,
}

fn encode(snapshot: &DemandSnapshot, taken: &[(String, RunnerJob)]) -> String {
    let published = Published {
        jobs: snapshot
            .jobs
            .iter()
            .map(|j| PublishedJob {
                job_id: j.job_id,
                run_id: j.run_id,
                repository: j.repository.clone(),
                name: j.name.clone(),
                queued_at_ms: j.queued_at_ms,
                labels: match &j.labels {
                    RunsOn::Labels(l) => Some(l.clone()),
                    RunsOn::Unresolvable(_) => None,
                },
                raw: match &j.labels {
                    RunsOn::Unresolvable(r) => Some(r.clone()),
                    RunsOn::Labels(_) => None,
                },
                from_fork: j.from_fork,
            })
            .collect(),
        is_floor: snapshot.is_floor,
        runners_with_jobs: snapshot.runners_with_jobs.iter().cloned().collect(),
        taken: taken
            .iter()
            .map(|(runner, j)| PublishedTaken {
                runner: runner.clone(),
                job_id: j.job_id,
                run_id: j.run_id,
                name: j.name.clone(),
                repository: j.repository.clone(),
                workflow_name: j.workflow_name.clone(),
                html_url: j.html_url.clone(),
                status: j.status.clone(),
                from_fork: j.from_fork,
            })
            .collect(),
    };
    // Plain data: serialising it cannot fail.
    serde_json::to_string(&published).unwrap_or_default()
}

fn decode(text: &str) -> Option<(DemandSnapshot, Vec<(String, RunnerJob)>)> {
    let published: Published = serde_json::from_str(text).ok()?;
    let taken = published
        .taken
        .into_iter()
        .map(|t| {
            let job = RunnerJob {
                job_id: t.job_id,
                run_id: t.run_id,
                name: t.name,
                repository: t.repository,
                workflow_name: t.workflow_name,
                html_url: t.html_url,
                status: t.status,
                from_fork: t.from_fork,
                // A peer's word (learn_runner_job keeps only this host's own confirmation).
                confirmed: false,
            };
            (t.runner, job)
        })
        .collect();
    let snapshot = DemandSnapshot {
        jobs: published
            .jobs
            .into_iter()
            .map(|j| JobDemand {
                job_id: j.job_id,
                run_id: j.run_id,
                repository: j.repository,
                name: j.name,
                queued_at_ms: j.queued_at_ms,
                labels: match j.labels {
                    Some(l) => RunsOn::Labels(l),
                    None => RunsOn::Unresolvable(j.raw.unwrap_or_default()),
                },
                from_fork: j.from_fork,
            })
            .collect(),
        is_floor: published.is_floor,
        runners_with_jobs: published.runners_with_jobs.into_iter().collect(),
    };
    Some((snapshot, taken))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, labels: RunsOn) -> JobDemand {
        JobDemand {
            job_id: id,
            run_id: 7,
            repository: "octo/hello".into(),
            name: "build".into(),
            queued_at_ms: Some(1_700_000_000_000),
            labels,
            from_fork: id % 2 == 0,
        }
    }

    #[test]
    fn a_published_queue_reads_back_as_it_was_read() {
        let snapshot = DemandSnapshot {
            jobs: vec![
                job(
                    1,
                    RunsOn::Labels(vec!["self-hosted".into(), "rm-pool".into()]),
                ),
                job(2, RunsOn::Unresolvable("${{ matrix.os }}".into())),
            ],
            is_floor: true,
            runners_with_jobs: ["rm-abc".to_owned()].into_iter().collect(),
        };
        let taken = vec![(
            "rm-abc".to_owned(),
            RunnerJob {
                job_id: 1,
                run_id: 7,
                name: Some("build".into()),
                repository: "octo/hello".into(),
                workflow_name: Some("CI".into()),
                html_url: None,
                status: "in_progress".into(),
                from_fork: false,
                confirmed: false,
            },
        )];
        assert_eq!(
            decode(&encode(&snapshot, &taken)),
            Some((snapshot.clone(), taken))
        );
        // What an earlier version published (no `taken`) still reads.
        let older = encode(&snapshot, &[]).replace(",\"taken\":[]", "");
        assert!(!older.contains("taken"), "{older}");
        assert_eq!(decode(&older), Some((snapshot, Vec::new())));
        assert_eq!(decode("{not json"), None);
    }

    #[test]
    fn jobs_other_hosts_hold_are_not_demand_here() {
        let snapshot = DemandSnapshot {
            jobs: (1..=4).map(|i| job(i, RunsOn::Labels(vec![]))).collect(),
            ..DemandSnapshot::default()
        };
        let left = without(snapshot, &[2, 4]);
        let ids: Vec<u64> = left.jobs.iter().map(|j| j.job_id).collect();
        assert_eq!(ids, vec![1, 3]);
    }
}
