//! The pool's database side against a real PostgreSQL (a throwaway cluster per test, see
//! `support`): claims that never overlap, leases that place a silent host's jobs elsewhere,
//! one demand reader per label, the schema migrated once and a newer one refused, an
//! unreachable database reported as such and recovered from, and bad input named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use rm_pool::{PoolError, PoolStore, PoolUrl, StoreSettings};
use support::Cluster;

/// Short leases, so expiry is tested in seconds; long enough that a busy machine's stalls
/// between two steps of one test never make a live host look silent.
const LEASE: Duration = Duration::from_secs(3);

async fn store(cluster: &Cluster, host: &str, lease: Duration) -> PoolStore {
    let (url, pw) = PoolUrl::parse(&cluster.url()).unwrap();
    let mut settings = StoreSettings::new(host);
    settings.lease = lease;
    PoolStore::connect(&url, pw.as_ref(), settings)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_claiming_at_once_never_get_one_job_twice() {
    let pg = Cluster::start();
    let mut hosts = Vec::new();
    for name in ["h1", "h2", "h3"] {
        let s = store(&pg, name, Duration::from_secs(30)).await;
        s.heartbeat(name, 4, 4).await.unwrap();
        hosts.push(s);
    }
    let jobs: Vec<u64> = (1..=40).collect();
    let mut got: Vec<Vec<u64>> = vec![Vec::new(); 3];
    for _round in 0..10 {
        // All three claim at once, each at most 4 per pass.
        let rounds = hosts.iter_mut().map(|s| {
            let jobs = jobs.clone();
            async move { s.claim("rm-pool-linux-x64", &jobs, 4).await.unwrap() }
        });
        let answers = futures_util::future::join_all(rounds).await;
        for (i, a) in answers.into_iter().enumerate() {
            assert!(a.len() <= 4, "never more than asked: {a:?}");
            got[i].extend(a);
        }
    }
    let all: Vec<u64> = got.iter().flatten().copied().collect();
    let distinct: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(all.len(), distinct.len(), "a job claimed twice: {got:?}");
    assert_eq!(
        distinct,
        jobs.iter().copied().collect(),
        "every job claimed"
    );
    let claims = hosts[0].claims().await.unwrap();
    assert_eq!(claims.len(), 40);
    let listed = hosts[0].hosts().await.unwrap();
    assert_eq!(listed.iter().map(|h| h.claims).sum::<u32>(), 40);
    assert!(listed.iter().all(|h| h.alive && h.capacity == 4));

    // A host's released claims are claimable again.
    hosts[0].release(&got[0]).await.unwrap();
    let again = hosts[1]
        .claim("rm-pool-linux-x64", &jobs, 100)
        .await
        .unwrap();
    assert_eq!(
        again.iter().copied().collect::<BTreeSet<_>>(),
        got[0].iter().copied().collect()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_hosts_claims_are_placed_elsewhere_after_its_lease() {
    let pg = Cluster::start();
    let mut a = store(&pg, "a", LEASE).await;
    let mut b = store(&pg, "b", LEASE).await;
    a.heartbeat("a", 2, 2).await.unwrap();
    b.heartbeat("b", 2, 2).await.unwrap();
    assert_eq!(a.claim("pool", &[1, 2], 2).await.unwrap(), vec![1, 2]);
    // While `a` heartbeats, its claims hold (as while its runner is being brought up).
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        a.heartbeat("a", 2, 0).await.unwrap();
        b.heartbeat("b", 2, 2).await.unwrap();
        assert!(b.claim("pool", &[1, 2], 2).await.unwrap().is_empty());
    }
    // `a` goes silent (crashed, cut off): after its lease the jobs are `b`'s to take.
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    b.heartbeat("b", 2, 2).await.unwrap();
    assert_eq!(b.claim("pool", &[1, 2], 2).await.unwrap(), vec![1, 2]);
    let hosts = b.hosts().await.unwrap();
    let a_row = hosts.iter().find(|h| h.host_id == "a").unwrap();
    assert!(!a_row.alive && a_row.claims == 0, "{a_row:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_waits_for_its_runner_only_within_the_bring_up_bound() {
    let pg = Cluster::start();
    let (url, pw) = PoolUrl::parse(&pg.url()).unwrap();
    let mut settings = StoreSettings::new("slow");
    settings.bring_up_bound = LEASE;
    let mut slow = PoolStore::connect(&url, pw.as_ref(), settings.clone())
        .await
        .unwrap();
    settings.host_id = "other".into();
    let mut other = PoolStore::connect(&url, pw.as_ref(), settings)
        .await
        .unwrap();
    slow.heartbeat("slow", 1, 1).await.unwrap();
    other.heartbeat("other", 1, 1).await.unwrap();
    assert_eq!(slow.claim("pool", &[7], 1).await.unwrap(), vec![7]);
    assert!(other.claim("pool", &[7], 1).await.unwrap().is_empty());
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    slow.heartbeat("slow", 1, 0).await.unwrap();
    assert_eq!(
        other.claim("pool", &[7], 1).await.unwrap(),
        vec![7],
        "a runner never brought up does not hold its job for ever"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_host_reads_a_labels_demand_and_the_others_read_what_it_published() {
    let pg = Cluster::start();
    let mut a = store(&pg, "a", LEASE).await;
    let mut b = store(&pg, "b", LEASE).await;
    assert!(a.lead("pool").await.unwrap());
    assert!(!b.lead("pool").await.unwrap(), "one reader per label");
    assert!(
        b.lead("other-label").await.unwrap(),
        "another label has its own"
    );
    assert_eq!(b.demand("pool").await.unwrap().age_secs, None);
    assert!(a.publish_demand("pool", &[5, 3, 9]).await.unwrap());
    assert!(
        !b.publish_demand("pool", &[1]).await.unwrap(),
        "only the reader publishes"
    );
    let seen = b.demand("pool").await.unwrap();
    assert_eq!(seen.jobs, vec![3, 5, 9]);
    assert!(seen.age_secs.is_some_and(|a| a < 5.0), "{seen:?}");
    assert!(a.lead("pool").await.unwrap(), "the reader keeps its lease");
    // The reader goes silent: another host takes over after the lease.
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    assert!(b.lead("pool").await.unwrap());
    assert!(!a.lead("pool").await.unwrap());
    assert!(b.publish_demand("pool", &[]).await.unwrap());
    assert!(a.demand("pool").await.unwrap().jobs.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_is_set_up_once_by_whoever_comes_first_and_a_newer_one_is_refused() {
    let pg = Cluster::start();
    let (url, pw) = PoolUrl::parse(&pg.url()).unwrap();
    let joins = (0..4).map(|i| {
        let (url, pw) = (url.clone(), pw.clone());
        tokio::spawn(async move {
            PoolStore::connect(&url, pw.as_ref(), StoreSettings::new(format!("h{i}")))
                .await
                .map(|_| ())
        })
    });
    for j in joins {
        j.await.unwrap().unwrap();
    }
    assert_eq!(pg.psql("SELECT schema_version FROM rm_pool_meta"), "1");
    assert_eq!(pg.psql("SELECT count(*) FROM rm_pool_meta"), "1");

    pg.psql("UPDATE rm_pool_meta SET schema_version = 99");
    let err = PoolStore::connect(&url, pw.as_ref(), StoreSettings::new("old"))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            PoolError::NewerSchema {
                found: 99,
                supported: 1
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("update runner-manager"), "{err}");
    assert_eq!(
        pg.psql("SELECT schema_version FROM rm_pool_meta"),
        "99",
        "left untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_goes_away_is_unreachable_until_it_answers_again() {
    let mut pg = Cluster::start();
    let mut a = store(&pg, "a", Duration::from_secs(30)).await;
    a.heartbeat("a", 2, 2).await.unwrap();
    assert_eq!(a.claim("pool", &[1], 1).await.unwrap(), vec![1]);
    pg.halt();
    let err = a.heartbeat("a", 2, 2).await.unwrap_err();
    assert!(err.is_unreachable(), "{err:?}");
    assert!(a.is_closed());
    let (url, pw) = PoolUrl::parse(&pg.url()).unwrap();
    let err = PoolStore::connect(&url, pw.as_ref(), StoreSettings::new("a"))
        .await
        .err()
        .unwrap();
    assert!(err.is_unreachable(), "{err:?}");
    assert!(err.to_string().contains("resumes by itself"), "{err}");
    pg.resume();
    let b = store(&pg, "a", Duration::from_secs(30)).await;
    b.heartbeat("a", 2, 2).await.unwrap();
    let claims = b.claims().await.unwrap();
    assert_eq!(
        claims.len(),
        1,
        "claims survive a database restart: {claims:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_addresses_and_passwords_are_named_with_their_fix() {
    let pg = Cluster::start();
    let settings = || StoreSettings::new("h");
    // A wrong password.
    let wrong = pg.url().replace(support::PASSWORD, "not-the-password");
    let (url, pw) = PoolUrl::parse(&wrong).unwrap();
    let err = PoolStore::connect(&url, pw.as_ref(), settings())
        .await
        .err()
        .unwrap();
    assert!(matches!(err, PoolError::WrongPassword { .. }), "{err:?}");
    assert!(err.to_string().contains("pool join"), "{err}");
    assert!(!err.to_string().contains("not-the-password"), "{err}");
    // A database that does not exist.
    let (url, pw) = PoolUrl::parse(&pg.url().replace("/pool", "/nope")).unwrap();
    let err = PoolStore::connect(&url, pw.as_ref(), settings())
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("createdb"), "{err}");
    // Nothing listening.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (url, pw) = PoolUrl::parse(&format!("postgres://u:p@127.0.0.1:{port}/pool")).unwrap();
    let err = PoolStore::connect(&url, pw.as_ref(), settings())
        .await
        .err()
        .unwrap();
    assert!(err.is_unreachable(), "{err:?}");
    // Something else on the port: an HTTP server.
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = http.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        while let Ok((mut s, _)) = http.accept().await {
            tokio::spawn(async move {
                // As an HTTP server does: read what came, answer 400, close after the peer
                // (closing with unread input would reset the connection instead).
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
                let _ = s.shutdown().await;
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    let (url, pw) = PoolUrl::parse(&format!("postgres://u:p@127.0.0.1:{port}/pool")).unwrap();
    let err = PoolStore::connect(&url, pw.as_ref(), settings())
        .await
        .err()
        .unwrap();
    assert!(matches!(err, PoolError::NotPostgres { .. }), "{err:?}");
    assert!(err.to_string().contains("check the host and port"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_leaves_frees_its_jobs_at_once() {
    let pg = Cluster::start();
    let mut a = store(&pg, "a", Duration::from_secs(30)).await;
    let mut b = store(&pg, "b", Duration::from_secs(30)).await;
    a.heartbeat("a", 1, 1).await.unwrap();
    b.heartbeat("b", 1, 1).await.unwrap();
    assert_eq!(a.claim("pool", &[4], 1).await.unwrap(), vec![4]);
    assert!(a.lead("pool").await.unwrap());
    a.leave().await.unwrap();
    assert_eq!(b.claim("pool", &[4], 1).await.unwrap(), vec![4]);
    assert!(b.lead("pool").await.unwrap());
    assert!(b.hosts().await.unwrap().iter().all(|h| h.host_id != "a"));
}
