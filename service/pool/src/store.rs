//! One host's connection to the pool database. Every statement is bounded in time: a database
//! that does not answer is [`PoolError::Unreachable`], never a hang.

use std::future::Future;
use std::time::Duration;

use secrecy::SecretString;
use tokio_postgres::{Client, NoTls};

use crate::error::PoolError;
use crate::url::PoolUrl;

/// How a host takes part in the pool.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// This host's id in the pool (unique among its hosts).
    pub host_id: String,
    /// How long a heartbeat keeps this host's claims: a host silent for longer (crashed, cut
    /// off) has its claims placed elsewhere.
    pub lease: Duration,
    /// How long a claim may wait for its runner to be brought up (a package download) while
    /// its host is alive; past it, the job may be claimed again.
    pub bring_up_bound: Duration,
    /// The most a connection attempt or a statement may take.
    pub timeout: Duration,
}

impl StoreSettings {
    /// A 30 s lease, 10 min to bring a runner up, 10 s per statement.
    pub fn new(host_id: impl Into<String>) -> Self {
        StoreSettings {
            host_id: host_id.into(),
            lease: Duration::from_secs(30),
            bring_up_bound: Duration::from_secs(600),
            timeout: Duration::from_secs(10),
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
}

/// A job a host has claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub job_id: u64,
    pub pool_label: String,
    pub host_id: String,
}

/// The demand one reader published for a label.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedDemand {
    pub jobs: Vec<u64>,
    /// Seconds since it was read from GitHub; `None` before anyone published.
    pub age_secs: Option<f64>,
}

/// This host's connection to the pool database.
pub struct PoolStore {
    client: Client,
    address: String,
    user: String,
    settings: StoreSettings,
    connection: tokio::task::JoinHandle<()>,
}

impl Drop for PoolStore {
    fn drop(&mut self) {
        self.connection.abort();
    }
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

impl PoolStore {
    /// Connects (within the timeout) and brings the schema up to date.
    pub async fn connect(
        url: &PoolUrl,
        password: Option<&SecretString>,
        settings: StoreSettings,
    ) -> Result<PoolStore, PoolError> {
        let mut config = url.config(password)?;
        config.connect_timeout(settings.timeout);
        let address = url.address();
        let user = url.user().to_owned();
        let connected = tokio::time::timeout(settings.timeout, config.connect(NoTls)).await;
        let (mut client, connection) = match connected {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(PoolError::from_driver(&e, &address, &user, true)),
            Err(_) => {
                return Err(PoolError::Unreachable {
                    address,
                    detail: format!("no answer within {} s", settings.timeout.as_secs()),
                })
            }
        };
        let connection = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "pool database connection ended");
            }
        });
        let migrated = tokio::time::timeout(
            settings.timeout,
            crate::schema::migrate(&mut client, &address, &user),
        )
        .await;
        match migrated {
            Ok(Ok(_)) => {}
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

    /// Renews this host's lease and says how much it can take now.
    pub async fn heartbeat(&self, label: &str, capacity: u32, free: u32) -> Result<(), PoolError> {
        let (capacity, free) = (
            i32::try_from(capacity).unwrap_or(i32::MAX),
            i32::try_from(free).unwrap_or(i32::MAX),
        );
        let lease = self.settings.lease.as_secs_f64();
        self.bounded(self.client.execute(
            "INSERT INTO rm_pool_hosts (host_id, label, capacity, free, lease_until, seen_at)
             VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5), now())
             ON CONFLICT (host_id) DO UPDATE SET label = $2, capacity = $3, free = $4,
                 lease_until = now() + make_interval(secs => $5), seen_at = now()",
            &[&self.settings.host_id, &label, &capacity, &free, &lease],
        ))
        .await
        .map(|_| ())
    }

    /// Claims, in one transaction, at most `max` of `candidates` (in their order: the oldest
    /// queued first) that no live host holds; answers the ones this host now holds. Claims of
    /// hosts whose lease lapsed, and claims older than the bring-up bound, are dropped first:
    /// their jobs are claimable again.
    pub async fn claim(
        &mut self,
        pool_label: &str,
        candidates: &[u64],
        max: u32,
    ) -> Result<Vec<u64>, PoolError> {
        if max == 0 || candidates.is_empty() {
            return Ok(Vec::new());
        }
        let candidates = ids(candidates);
        let limit = i64::from(max);
        let bound = self.settings.bring_up_bound.as_secs_f64();
        let host = self.settings.host_id.clone();
        let label = pool_label.to_owned();
        let client = &mut self.client;
        let work = async move {
            let tx = client.transaction().await?;
            tx.execute(
                "DELETE FROM rm_pool_claims c
                 WHERE c.pool_label = $1
                   AND (c.claimed_at < now() - make_interval(secs => $2)
                        OR NOT EXISTS (SELECT 1 FROM rm_pool_hosts h
                                       WHERE h.host_id = c.host_id AND h.lease_until > now()))",
                &[&label, &bound],
            )
            .await?;
            let rows = tx
                .query(
                    "INSERT INTO rm_pool_claims (job_id, pool_label, host_id, claimed_at)
                     SELECT t.j, $1, $2, now()
                     FROM unnest($3::bigint[]) WITH ORDINALITY AS t(j, n)
                     WHERE NOT EXISTS (SELECT 1 FROM rm_pool_claims c WHERE c.job_id = t.j)
                     ORDER BY t.n
                     LIMIT $4
                     ON CONFLICT (job_id) DO NOTHING
                     RETURNING job_id",
                    &[&label, &host, &candidates, &limit],
                )
                .await?;
            tx.commit().await?;
            Ok(rows.iter().map(|r| job_id(r.get(0))).collect::<Vec<u64>>())
        };
        bounded(self.settings.timeout, &self.address, &self.user, work).await
    }

    /// Gives up this host's claims on `jobs` (its runner took a job, ended, or the job is no
    /// longer queued).
    pub async fn release(&self, jobs: &[u64]) -> Result<(), PoolError> {
        if jobs.is_empty() {
            return Ok(());
        }
        self.bounded(self.client.execute(
            "DELETE FROM rm_pool_claims WHERE host_id = $1 AND job_id = ANY($2::bigint[])",
            &[&self.settings.host_id, &ids(jobs)],
        ))
        .await
        .map(|_| ())
    }

    /// Every claim of the pool, oldest first.
    pub async fn claims(&self) -> Result<Vec<Claim>, PoolError> {
        let rows = self
            .bounded(self.client.query(
                "SELECT job_id, pool_label, host_id FROM rm_pool_claims
                 ORDER BY claimed_at, job_id",
                &[],
            ))
            .await?;
        Ok(rows
            .iter()
            .map(|r| Claim {
                job_id: job_id(r.get(0)),
                pool_label: r.get(1),
                host_id: r.get(2),
            })
            .collect())
    }

    /// The pool's hosts, with their free capacity and how many claims each holds.
    pub async fn hosts(&self) -> Result<Vec<PoolHost>, PoolError> {
        let rows = self
            .bounded(self.client.query(
                "SELECT h.host_id, h.label, h.capacity, h.free, h.lease_until > now(),
                        (SELECT count(*) FROM rm_pool_claims c WHERE c.host_id = h.host_id)
                 FROM rm_pool_hosts h ORDER BY h.host_id",
                &[],
            ))
            .await?;
        let count = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        Ok(rows
            .iter()
            .map(|r| PoolHost {
                host_id: r.get(0),
                label: r.get(1),
                capacity: u32::try_from(r.get::<_, i32>(2)).unwrap_or(0),
                free: u32::try_from(r.get::<_, i32>(3)).unwrap_or(0),
                alive: r.get(4),
                claims: count(r.get(5)),
            })
            .collect())
    }

    /// Takes or keeps the right to read `pool_label`'s demand from GitHub for the pool (one
    /// reader per label, so the hosts together cost GitHub what one does). True: this host
    /// reads and publishes; false: another live host does, read what it published.
    pub async fn lead(&self, pool_label: &str) -> Result<bool, PoolError> {
        let lease = self.settings.lease.as_secs_f64();
        let rows = self
            .bounded(self.client.query(
                "INSERT INTO rm_pool_readers (pool_label, host_id, lease_until)
                 VALUES ($1, $2, now() + make_interval(secs => $3))
                 ON CONFLICT (pool_label) DO UPDATE
                     SET host_id = EXCLUDED.host_id, lease_until = EXCLUDED.lease_until
                     WHERE rm_pool_readers.host_id = EXCLUDED.host_id
                        OR rm_pool_readers.lease_until < now()
                 RETURNING host_id",
                &[&pool_label, &self.settings.host_id, &lease],
            ))
            .await?;
        Ok(!rows.is_empty())
    }

    /// Replaces `pool_label`'s published demand with `jobs`, if this host is still its reader;
    /// answers whether it was published.
    pub async fn publish_demand(
        &mut self,
        pool_label: &str,
        jobs: &[u64],
    ) -> Result<bool, PoolError> {
        let jobs = ids(jobs);
        let host = self.settings.host_id.clone();
        let label = pool_label.to_owned();
        let client = &mut self.client;
        let work = async move {
            let tx = client.transaction().await?;
            let reader = tx
                .query_opt(
                    "SELECT 1 FROM rm_pool_readers
                     WHERE pool_label = $1 AND host_id = $2 AND lease_until > now()
                     FOR UPDATE",
                    &[&label, &host],
                )
                .await?;
            if reader.is_none() {
                return Ok(false);
            }
            tx.execute(
                "DELETE FROM rm_pool_demand WHERE pool_label = $1",
                &[&label],
            )
            .await?;
            tx.execute(
                "INSERT INTO rm_pool_demand (pool_label, job_id)
                 SELECT $1, j FROM unnest($2::bigint[]) AS t(j) ON CONFLICT DO NOTHING",
                &[&label, &jobs],
            )
            .await?;
            tx.execute(
                "UPDATE rm_pool_readers SET read_at = now() WHERE pool_label = $1",
                &[&label],
            )
            .await?;
            tx.commit().await?;
            Ok(true)
        };
        bounded(self.settings.timeout, &self.address, &self.user, work).await
    }

    /// The demand the reader of `pool_label` published last, and how old it is.
    pub async fn demand(&self, pool_label: &str) -> Result<PublishedDemand, PoolError> {
        let rows = self
            .bounded(self.client.query(
                "SELECT job_id FROM rm_pool_demand WHERE pool_label = $1 ORDER BY job_id",
                &[&pool_label],
            ))
            .await?;
        let age = self
            .bounded(self.client.query_opt(
                "SELECT EXTRACT(EPOCH FROM now() - read_at)::float8 FROM rm_pool_readers
                 WHERE pool_label = $1 AND read_at IS NOT NULL",
                &[&pool_label],
            ))
            .await?;
        Ok(PublishedDemand {
            jobs: rows.iter().map(|r| job_id(r.get(0))).collect(),
            age_secs: age.map(|r| r.get(0)),
        })
    }

    /// Leaves the pool: this host's claims, reader leases and row are deleted (its jobs are
    /// placed elsewhere at once, not after the lease).
    pub async fn leave(&mut self) -> Result<(), PoolError> {
        let host = self.settings.host_id.clone();
        let client = &mut self.client;
        let work = async move {
            let tx = client.transaction().await?;
            for table in ["rm_pool_claims", "rm_pool_readers", "rm_pool_hosts"] {
                tx.execute(&format!("DELETE FROM {table} WHERE host_id = $1"), &[&host])
                    .await?;
            }
            tx.commit().await
        };
        bounded(self.settings.timeout, &self.address, &self.user, work).await
    }
}
