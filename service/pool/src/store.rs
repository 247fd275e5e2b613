//! One host's connection to the pool database. Every statement is bounded in time: a database
//! that does not answer is [`PoolError::Unreachable`], never a hang.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use tokio_postgres::{Client, NoTls};

use crate::error::PoolError;
use crate::news::News;
use crate::url::PoolUrl;

/// How a host takes part in the pool.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// This host's id in the pool (unique among its hosts).
    pub host_id: String,
    /// How long a heartbeat keeps this host's claims: a host silent for longer (crashed, cut
    /// off) has its claims placed elsewhere.
    pub lease: Duration,
    /// How long a claim stands while its host is alive but its runner has not been seen to
    /// take a job (being brought up, a package download, then idle): past it, a runner that
    /// never came does not hold a job for ever and another host may claim it.
    pub bring_up_bound: Duration,
    /// How long a claim of this host may stand while its runner is not among the runners
    /// the host reports: a claim is taken just before its runner is journalled, so a young
    /// one is on its way; an older one has no runner coming (the host crashed between the
    /// two, or the claim's answer was lost with the connection) and goes at the next
    /// heartbeat rather than holding its job until the bring-up bound.
    pub orphan_grace: Duration,
    /// The most a connection attempt or a statement may take.
    pub timeout: Duration,
    /// Where the readers' news goes (see [`crate::news`]); `None`: not listened for.
    pub news: Option<Arc<News>>,
}

impl StoreSettings {
    /// A 30 s lease, 10 min to bring a runner up, 30 s for a claim's runner to be reported,
    /// 10 s per statement.
    pub fn new(host_id: impl Into<String>) -> Self {
        StoreSettings {
            host_id: host_id.into(),
            lease: Duration::from_secs(30),
            bring_up_bound: Duration::from_secs(600),
            orphan_grace: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
            news: None,
        }
    }
}

/// A host of the pool as the database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolHost {
    pub host_id: String,
    pub label: String,
    pub capacity: u32,
    pub free: u32,
    /// Its lease is current (it heartbeated within the lease).
    pub alive: bool,
    /// Jobs it holds claims on.
    pub claims: u32,
    /// Its runners as of its last heartbeat (kept as they were when its lease lapsed).
    pub running: Vec<Running>,
}

/// One runner of a host, as the host's heartbeat reported it: who runs what.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Running {
    pub runner: String,
    /// The repository or organization it serves.
    pub target: String,
    /// The job it was seen to take; `None` while starting or idle.
    pub job_id: Option<u64>,
    pub job_name: Option<String>,
}

/// A runner a host started and has not yet been seen to take a job, bound to one queued job.
/// GitHub hands a queued job to any idle runner with matching labels, so the bound job is
/// bookkeeping (one claim per queued job), not the job the runner will take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub job_id: u64,
    /// The repository or organization whose queue the job is in.
    pub target: String,
    pub host_id: String,
    pub runner: String,
    /// The runner ended after running a job; the claim counts until the next publish shows
    /// which queued job it consumed.
    pub ran_job: bool,
}

/// What the reader of a target published last.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// As the reader serialised it; never parsed here.
    pub snapshot: String,
    /// Since it was read from GitHub.
    pub age: Duration,
    /// Queued jobs that runners of other live hosts are bound to: the demand left to act on
    /// is the snapshot's jobs without these.
    pub claimed_elsewhere: Vec<u64>,
}

/// This host's connection to the pool database.
pub struct PoolStore {
    client: Client,
    address: String,
    user: String,
    settings: StoreSettings,
    connection: tokio::task::JoinHandle<()>,
    /// The runners this connection last wrote for this host: a heartbeat rewrites them only
    /// when they changed (most heartbeats then cost one statement).
    running_written: Option<Vec<Running>>,
}

impl Drop for PoolStore {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// Serialises, within one transaction, everything that changes one target's claims (hosts
/// claiming, the reader publishing): two hosts never take the same queued job at once, and
/// a claim is never placed while the claims are being settled against a new snapshot.
const TARGET_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/// A claim no longer stands (`c`: the claim; `$2`: the bring-up bound in seconds): its host's
/// lease lapsed (crashed, cut off: its runner may never come) or its runner was not seen to
/// take a job within the bound.
macro_rules! lapsed {
    () => {
        "(c.claimed_at < now() - make_interval(secs => $2)
          OR NOT EXISTS (SELECT 1 FROM rm_pool_hosts h
                         WHERE h.host_id = c.host_id AND h.lease_until > now()))"
    };
}

fn ids(jobs: &[u64]) -> Vec<i64> {
    jobs.iter().filter_map(|j| i64::try_from(*j).ok()).collect()
}

fn job_id(v: i64) -> u64 {
    u64::try_from(v).unwrap_or_default()
}

/// `work` within `timeout`; a driver error classified, no answer in time `Unreachable`.
async fn bounded<T>(
    timeout: Duration,
    address: &str,
    user: &str,
    work: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, PoolError> {
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(PoolError::from_driver(&e, address, user, false)),
        Err(_) => Err(PoolError::Unreachable {
            address: address.to_owned(),
            detail: format!("no answer within {} s", timeout.as_secs()),
        }),
    }
}

/// Connects with `tls` (rustls, or none) and runs the connection in its own task: the client
/// alike either way. The task hands the notifications it reads to `news`.
async fn open<T>(
    config: &tokio_postgres::Config,
    tls: T,
    news: Option<Arc<News>>,
) -> Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>
where
    T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>,
    T::Stream: Send + 'static,
{
    let (client, mut connection) = config.connect(tls).await?;
    let connection = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                    if let Some(news) = &news {
                        news.heard(n.payload());
                    }
                }
                // A server notice (a warning about the session): nothing to act on.
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "pool database connection ended");
                    break;
                }
                None => break,
            }
        }
    });
    Ok((client, connection))
}

impl PoolStore {
    /// Connects (within the timeout) and brings the schema up to date. With TLS when the URL
    /// asks for it (see [`crate::url`]); its failures are told with their fix, never as
    /// unreachable.
    pub async fn connect(
        url: &PoolUrl,
        password: Option<&SecretString>,
        settings: StoreSettings,
    ) -> Result<PoolStore, PoolError> {
        let mut config = url.config(password)?;
        config.connect_timeout(settings.timeout);
        let address = url.address();
        let user = url.user().to_owned();
        let connected = match url.tls() {
            Some(tls) => {
                let tls = crate::tls::connector(tls, &address)?;
                let opened = open(&config, tls, settings.news.clone());
                tokio::time::timeout(settings.timeout, opened).await
            }
            None => {
                let opened = open(&config, NoTls, settings.news.clone());
                tokio::time::timeout(settings.timeout, opened).await
            }
        };
        let (mut client, connection) = match connected {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                return Err(crate::tls::classify(&e, url)
                    .unwrap_or_else(|| PoolError::from_driver(&e, &address, &user, true)))
            }
            Err(_) => {
                return Err(PoolError::Unreachable {
                    address,
                    detail: format!("no answer within {} s", settings.timeout.as_secs()),
                })
            }
        };
        // Listening is set up with the schema: a host that joins hears the next publish.
        let listen = settings.news.is_some();
        let set_up = async {
            crate::schema::migrate(&mut client, &address, &user).await?;
            if listen {
                let sql = format!("LISTEN {}", crate::news::CHANNEL);
                client
                    .batch_execute(&sql)
                    .await
                    .map_err(|e| PoolError::from_driver(&e, &address, &user, false))?;
            }
            Ok(())
        };
        let migrated = tokio::time::timeout(settings.timeout, set_up).await;
        match migrated {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                connection.abort();
                return Err(e);
            }
            Err(_) => {
                connection.abort();
                return Err(PoolError::Unreachable {
                    address,
                    detail: "setting up the schema took too long".into(),
                });
            }
        }
        Ok(PoolStore {
            client,
            address,
            user,
            settings,
            connection,
            running_written: None,
        })
    }

    /// The connection is gone (the database restarted, the network dropped): connect again.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    pub fn host_id(&self) -> &str {
        &self.settings.host_id
    }

    /// Runs one database round within the timeout.
    async fn bounded<T>(
        &self,
        work: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, PoolError> {
        bounded(self.settings.timeout, &self.address, &self.user, work).await
    }

    /// Renews this host's lease, says how much it can take now and, when they changed since
    /// the last heartbeat on this connection, which runners it has (who runs what; `None`:
    /// not known now, the last written stand). With the runners known, this host's claims
    /// older than the orphan grace whose runner is not among them go (see
    /// [`StoreSettings::orphan_grace`]); a claim whose runner ran a job stays until the next
    /// publish, as ever. Call it after telling the runner ends the database missed, so such a
    /// claim is marked before it could be taken for an orphan.
    pub async fn heartbeat(
        &mut self,
        label: &str,
        capacity: u32,
        free: u32,
        running: Option<&[Running]>,
    ) -> Result<(), PoolError> {
        let (capacity, free) = (
            i32::try_from(capacity).unwrap_or(i32::MAX),
            i32::try_from(free).unwrap_or(i32::MAX),
        );
        let lease = self.settings.lease.as_secs_f64();
        let running = running.map(|r| {
            let mut r = r.to_vec();
            r.sort();
            r
        });
        let rewrite = running.is_some() && self.running_written != running;
        let host = self.settings.host_id.clone();
        let grace = self.settings.orphan_grace.as_secs_f64();
        let client = &mut self.client;
        let rows = running.clone().unwrap_or_default();
        let known = running.is_some();
        let work = async move {
            const RENEW: &str =
                "INSERT INTO rm_pool_hosts (host_id, label, capacity, free, lease_until, seen_at)
                 VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5), now())
                 ON CONFLICT (host_id) DO UPDATE SET label = $2, capacity = $3, free = $4,
                     lease_until = now() + make_interval(secs => $5), seen_at = now()";
            // The same, and in the same statement (a heartbeat stays one statement) this
            // host's orphaned claims go.
            const RENEW_AND_DROP_ORPHANS: &str = "WITH orphans AS (
                     DELETE FROM rm_pool_claims
                     WHERE host_id = $1 AND NOT ran_job
                       AND claimed_at < now() - make_interval(secs => $6)
                       AND runner <> ALL($7::text[]))
                 INSERT INTO rm_pool_hosts (host_id, label, capacity, free, lease_until, seen_at)
                 VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5), now())
                 ON CONFLICT (host_id) DO UPDATE SET label = $2, capacity = $3, free = $4,
                     lease_until = now() + make_interval(secs => $5), seen_at = now()";
            let runners: Vec<&str> = rows.iter().map(|r| r.runner.as_str()).collect();
            let renew: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                [&host, &label, &capacity, &free, &lease];
            let renew_and_drop: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
                [&host, &label, &capacity, &free, &lease, &grace, &runners];
            let (sql, params): (&str, &[&(dyn tokio_postgres::types::ToSql + Sync)]) = if known {
                (RENEW_AND_DROP_ORPHANS, &renew_and_drop)
            } else {
                (RENEW, &renew)
            };
            if !rewrite {
                return client.execute(sql, params).await.map(|_| ());
            }
            let tx = client.transaction().await?;
            tx.execute(sql, params).await?;
            tx.execute("DELETE FROM rm_pool_running WHERE host_id = $1", &[&host])
                .await?;
            let targets: Vec<&str> = rows.iter().map(|r| r.target.as_str()).collect();
            let jobs: Vec<Option<i64>> = rows
                .iter()
                .map(|r| r.job_id.and_then(|j| i64::try_from(j).ok()))
                .collect();
            let names: Vec<Option<&str>> = rows.iter().map(|r| r.job_name.as_deref()).collect();
            tx.execute(
                "INSERT INTO rm_pool_running (host_id, runner, target, job_id, job_name)
                 SELECT $1, r, t, j, n
                 FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[]) AS u(r, t, j, n)
                 ON CONFLICT DO NOTHING",
                &[&host, &runners, &targets, &jobs, &names],
            )
            .await?;
            tx.commit().await
        };
        bounded(self.settings.timeout, &self.address, &self.user, work).await?;
        if rewrite {
            self.running_written = running;
        }
        Ok(())
    }

    /// Claims one queued job of `target` for `runner`, before the runner is started: the first
    /// of `candidates` (in their order) that is in the published queue and that no claim
    /// holds. Answers `None` when none is (the runner must not be started), and the job it
    /// already holds when `runner` has a claim (asking again after a lost answer is safe).
    /// Claims of lapsed hosts, or past the bring-up bound, are dropped first. A host whose
    /// own lease lapsed gets nothing: the next claimer would drop its claim at once, and its
    /// runner would then be a surplus one.
    pub async fn claim(
        &mut self,
        target: &str,
        runner: &str,
        candidates: &[u64],
    ) -> Result<Option<u64>, PoolError> {
        let candidates = ids(candidates);
        let bound = self.settings.bring_up_bound.as_secs_f64();
        let host = self.settings.host_id.clone();
        let client = &mut self.client;
        let work = async move {
            let tx = client.transaction().await?;
            tx.execute(TARGET_LOCK, &[&target]).await?;
            tx.execute(
                concat!(
                    "DELETE FROM rm_pool_claims c WHERE c.target = $1 AND ",
                    lapsed!()
                ),
                &[&target, &bound],
            )
            .await?;
            let held = tx
                .query_opt(
                    "SELECT job_id FROM rm_pool_claims WHERE runner = $1",
                    &[&runner],
                )
                .await?;
            let row = match held {
                Some(row) => Some(row),
                None => {
                    tx.query_opt(
                        "INSERT INTO rm_pool_claims (job_id, target, host_id, runner, claimed_at)
                         SELECT t.j, $1, $2, $3, now()
                         FROM unnest($4::bigint[]) WITH ORDINALITY AS t(j, n)
                         WHERE EXISTS (SELECT 1 FROM rm_pool_queue q
                                       WHERE q.target = $1 AND q.job_id = t.j)
                           AND NOT EXISTS (SELECT 1 FROM rm_pool_claims c WHERE c.job_id = t.j)
                           AND EXISTS (SELECT 1 FROM rm_pool_hosts h
                                       WHERE h.host_id = $2 AND h.lease_until > now())
                         ORDER BY t.n
                         LIMIT 1
                         ON CONFLICT DO NOTHING
                         RETURNING job_id",
                        &[&target, &host, &runner, &candidates],
                    )
                    .await?
                }
            };
            tx.commit().await?;
            Ok(row.map(|r| job_id(r.get(0))))
        };
        bounded(self.settings.timeout, &self.address, &self.user, work).await
    }

    /// `runner` (of this host) ended. Without a job (it failed, or exited idle) its claim goes
    /// now: its job needs another runner. After a job the claim stays, marked, until the next
    /// publish: until GitHub's listing is read again the queued job it consumed is unknown, so
    /// dropping the claim now would let another host start a runner for a job already run.
    ///
    /// The end is news for the target (see [`crate::news`]): room is free on this host, so the
    /// target's reader reads GitHub's queue now, as a single host does when one of its runners
    /// ends, rather than at its next poll.
    pub async fn finish(&self, runner: &str, ran_job: bool) -> Result<(), PoolError> {
        // The payload is `crate::news::payload(host, target)`, built in SQL since the target
        // comes from the claim.
        let sql = if ran_job {
            "WITH ended AS (
                 UPDATE rm_pool_claims SET ran_job = true WHERE runner = $1 AND host_id = $2
                 RETURNING target)
             SELECT pg_notify($3, $2 || ' ' || target) FROM ended"
        } else {
            "WITH ended AS (
                 DELETE FROM rm_pool_claims WHERE runner = $1 AND host_id = $2
                 RETURNING target)
             SELECT pg_notify($3, $2 || ' ' || target) FROM ended"
        };
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&runner, &self.settings.host_id, &crate::news::CHANNEL];
        self.bounded(self.client.execute(sql, &params))
            .await
            .map(|_| ())
    }

    /// Every claim of the pool, oldest first.
    pub async fn claims(&self) -> Result<Vec<Claim>, PoolError> {
        let rows = self
            .bounded(self.client.query(
                "SELECT job_id, target, host_id, runner, ran_job FROM rm_pool_claims
                 ORDER BY claimed_at, runner",
                &[],
            ))
            .await?;
        Ok(rows
            .iter()
            .map(|r| Claim {
                job_id: job_id(r.get(0)),
                target: r.get(1),
                host_id: r.get(2),
                runner: r.get(3),
                ran_job: r.get(4),
            })
            .collect())
    }

    /// The pool's hosts, with their free capacity, how many claims each holds and its runners.
    pub async fn hosts(&self) -> Result<Vec<PoolHost>, PoolError> {
        let rows = self
            .bounded(self.client.query(
                "SELECT h.host_id, h.label, h.capacity, h.free, h.lease_until > now(),
                        (SELECT count(*) FROM rm_pool_claims c WHERE c.host_id = h.host_id)
                 FROM rm_pool_hosts h ORDER BY h.host_id",
                &[],
            ))
            .await?;
        let running = self
            .bounded(self.client.query(
                "SELECT host_id, runner, target, job_id, job_name FROM rm_pool_running
                 ORDER BY host_id, target, runner",
                &[],
            ))
            .await?;
        let count = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        Ok(rows
            .iter()
            .map(|r| {
                let host_id: String = r.get(0);
                let running = running
                    .iter()
                    .filter(|x| x.get::<_, &str>(0) == host_id)
                    .map(|x| Running {
                        runner: x.get(1),
                        target: x.get(2),
                        job_id: x.get::<_, Option<i64>>(3).map(job_id),
                        job_name: x.get(4),
                    })
                    .collect();
                PoolHost {
                    host_id,
                    label: r.get(1),
                    capacity: u32::try_from(r.get::<_, i32>(2)).unwrap_or(0),
                    free: u32::try_from(r.get::<_, i32>(3)).unwrap_or(0),
                    alive: r.get(4),
                    claims: count(r.get(5)),
                    running,
                }
            })
            .collect())
    }

    /// Takes or keeps the right to read `target`'s demand from GitHub for the pool (one
    /// reader per target, so the hosts together cost GitHub what one does). True: this host
    /// reads and publishes; false: another live host does, use what it published. Taking
    /// over keeps the last snapshot, so the others act on it until the new reader publishes.
    pub async fn lead(&self, target: &str) -> Result<bool, PoolError> {
        let lease = self.settings.lease.as_secs_f64();
        let rows = self
            .bounded(self.client.query(
                "INSERT INTO rm_pool_targets (target, reader, lease_until)
                 VALUES ($1, $2, now() + make_interval(secs => $3))
                 ON CONFLICT (target) DO UPDATE
                     SET reader = EXCLUDED.reader, lease_until = EXCLUDED.lease_until
                     WHERE rm_pool_targets.reader = EXCLUDED.reader
                        OR rm_pool_targets.lease_until < now()
                 RETURNING reader",
                &[&target, &self.settings.host_id, &lease],
            ))
            .await?;
        Ok(!rows.is_empty())
    }

    /// Publishes what this host, `target`'s reader, just read from GitHub: `snapshot` for the
    /// others, `queued` (the queued job ids) and `assigned_runners` (runners GitHub shows with
    /// a job). Answers false, changing nothing, when another host took the reader's lease
    /// since (its read is the one that counts). In the same transaction the target's claims
    /// are settled against the read: claims whose runner took a job (assigned, or ended after
    /// one), of lapsed hosts, or past the bring-up bound go; a remaining claim whose job left
    /// the queue (another host's runner took it) is bound to a queued job no claim holds,
    /// smallest first, since its runner, still idle, will take one of them. One that finds
    /// none keeps its old job id: its runner still counts, against the next job to come.
    pub async fn publish(
        &mut self,
        target: &str,
        snapshot: &str,
        queued: &[u64],
        assigned_runners: &[String],
    ) -> Result<bool, PoolError> {
        let queued = ids(queued);
        let bound = self.settings.bring_up_bound.as_secs_f64();
        let host = self.settings.host_id.clone();
        let payload = crate::news::payload(&host, target);
        let client = &mut self.client;
        let work = async move {
            let tx = client.transaction().await?;
            tx.execute(TARGET_LOCK, &[&target]).await?;
            let reader = tx
                .query_opt(
                    "SELECT 1 FROM rm_pool_targets WHERE target = $1 AND reader = $2
                     FOR UPDATE",
                    &[&target, &host],
                )
                .await?;
            if reader.is_none() {
                return Ok(false);
            }
            tx.execute("DELETE FROM rm_pool_queue WHERE target = $1", &[&target])
                .await?;
            tx.execute(
                "INSERT INTO rm_pool_queue (target, job_id)
                 SELECT $1, j FROM unnest($2::bigint[]) AS t(j) ON CONFLICT DO NOTHING",
                &[&target, &queued],
            )
            .await?;
            tx.execute(
                "UPDATE rm_pool_targets SET snapshot = $2, read_at = now() WHERE target = $1",
                &[&target, &snapshot],
            )
            .await?;
            tx.execute(
                concat!(
                    "DELETE FROM rm_pool_claims c WHERE c.target = $1
                     AND (c.ran_job OR c.runner = ANY($3::text[]) OR ",
                    lapsed!(),
                    ")"
                ),
                &[&target, &bound, &assigned_runners],
            )
            .await?;
            // Pairs the claims whose job left the queue (oldest claim first) with the queued
            // jobs no claim holds (smallest first). The new ids are held by no claim, so the
            // primary key never clashes mid-update.
            tx.execute(
                "WITH stale AS (
                     SELECT c.job_id, row_number() OVER (ORDER BY c.claimed_at, c.runner) AS n
                     FROM rm_pool_claims c
                     WHERE c.target = $1
                       AND NOT EXISTS (SELECT 1 FROM rm_pool_queue q
                                       WHERE q.target = $1 AND q.job_id = c.job_id)
                 ), free AS (
                     SELECT q.job_id, row_number() OVER (ORDER BY q.job_id) AS n
                     FROM rm_pool_queue q
                     WHERE q.target = $1
                       AND NOT EXISTS (SELECT 1 FROM rm_pool_claims c WHERE c.job_id = q.job_id)
                 )
                 UPDATE rm_pool_claims c SET job_id = f.job_id
                 FROM stale s JOIN free f ON f.n = s.n
                 WHERE c.job_id = s.job_id",
                &[&target],
            )
            .await?;
            // Jobs no claim holds are left for the other hosts: tell them now rather than at
            // their next poll (sent when the transaction commits). Nothing queued, nothing to
            // tell, and no statement spent.
            if !queued.is_empty() {
                tx.execute(
                    "SELECT pg_notify($2, $3) WHERE EXISTS (
                         SELECT 1 FROM rm_pool_queue q
                         WHERE q.target = $1
                           AND NOT EXISTS (SELECT 1 FROM rm_pool_claims c WHERE c.job_id = q.job_id))",
                    &[&target, &crate::news::CHANNEL, &payload],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(true)
        };
        bounded(self.settings.timeout, &self.address, &self.user, work).await
    }

    /// What `target`'s reader published last, its age, and the queued jobs runners of other
    /// live hosts are bound to (this host knows its own). `None` before anyone published.
    /// One statement, so the snapshot and the claims are of one moment.
    pub async fn published(&self, target: &str) -> Result<Option<Published>, PoolError> {
        let bound = self.settings.bring_up_bound.as_secs_f64();
        let row = self
            .bounded(self.client.query_opt(
                concat!(
                    "SELECT t.snapshot, EXTRACT(EPOCH FROM now() - t.read_at)::float8,
                        ARRAY(SELECT c.job_id FROM rm_pool_claims c
                              JOIN rm_pool_queue q ON q.target = t.target AND q.job_id = c.job_id
                              WHERE c.host_id <> $3 AND NOT ",
                    lapsed!(),
                    " ORDER BY c.job_id)
                     FROM rm_pool_targets t
                     WHERE t.target = $1 AND t.snapshot IS NOT NULL AND t.read_at IS NOT NULL"
                ),
                &[&target, &bound, &self.settings.host_id],
            ))
            .await?;
        Ok(row.map(|r| {
            let age: f64 = r.get(1);
            let elsewhere: Vec<i64> = r.get(2);
            Published {
                snapshot: r.get(0),
                age: Duration::try_from_secs_f64(age.max(0.0)).unwrap_or_default(),
                claimed_elsewhere: elsewhere.into_iter().map(job_id).collect(),
            }
        }))
    }

    /// Leaves the pool: this host's claims, runners and row are deleted (its jobs are placed elsewhere
    /// at once, not after the lease) and its reader leases end, so another host takes over
    /// at once; the last snapshot is kept for the others to act on until then.
    pub async fn leave(&mut self) -> Result<(), PoolError> {
        let host = self.settings.host_id.clone();
        let client = &mut self.client;
        let work = async move {
            let tx = client.transaction().await?;
            tx.execute("DELETE FROM rm_pool_claims WHERE host_id = $1", &[&host])
                .await?;
            tx.execute(
                "UPDATE rm_pool_targets SET lease_until = '-infinity' WHERE reader = $1",
                &[&host],
            )
            .await?;
            tx.execute("DELETE FROM rm_pool_running WHERE host_id = $1", &[&host])
                .await?;
            tx.execute("DELETE FROM rm_pool_hosts WHERE host_id = $1", &[&host])
                .await?;
            tx.commit().await
        };
        bounded(self.settings.timeout, &self.address, &self.user, work).await?;
        self.running_written = None;
        Ok(())
    }
}
