//! The pool's database side against a real PostgreSQL (a throwaway cluster per test, see
//! `support`): claims that never overlap and stay one to one with queued jobs when runners
//! take each other's jobs, claims settled by the reader's publish and by runners ending,
//! leases that place a silent host's jobs elsewhere, a claim whose runner never came
//! dropped at its host's next heartbeat, one demand reader per target, the schema
//! migrated once (and from the first version) and a newer one refused, who runs what on each
//! host, an unreachable database reported as such and recovered from, and bad input named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rm_pool::schema::SCHEMA_VERSION;
use rm_pool::{Claim, News, PoolError, PoolStore, PoolUrl, Running, StoreSettings};
use support::Cluster;

/// Short leases, so expiry is tested in seconds; long enough that a busy machine's stalls
/// between two steps of one test never make a live host look silent.
const LEASE: Duration = Duration::from_secs(3);
/// Long enough never to lapse within a test.
const LONG: Duration = Duration::from_secs(60);

const TARGET: &str = "repo:octo/hello";

async fn store(cluster: &Cluster, host: &str, lease: Duration) -> PoolStore {
    let (url, pw) = PoolUrl::parse(&cluster.url()).unwrap();
    let mut settings = StoreSettings::new(host);
    settings.lease = lease;
    PoolStore::connect(&url, pw.as_ref(), settings)
        .await
        .unwrap()
}

/// A live host.
async fn host(cluster: &Cluster, name: &str, lease: Duration) -> PoolStore {
    let mut s = store(cluster, name, lease).await;
    s.heartbeat("rm-pool-linux-x64", 4, 4, None).await.unwrap();
    s
}

/// Leads `TARGET` and publishes `queued`, with `assigned` runners shown busy.
async fn publish(s: &mut PoolStore, queued: &[u64], assigned: &[&str]) {
    assert!(s.lead(TARGET).await.unwrap());
    let assigned: Vec<String> = assigned.iter().map(|r| (*r).to_owned()).collect();
    assert!(s
        .publish(TARGET, &format!("{queued:?}"), queued, &assigned)
        .await
        .unwrap());
}

/// (job, runner, ran_job) of every claim, by job.
async fn claims(s: &PoolStore) -> Vec<(u64, String, bool)> {
    let mut all: Vec<(u64, String, bool)> = s
        .claims()
        .await
        .unwrap()
        .into_iter()
        .map(|c: Claim| (c.job_id, c.runner, c.ran_job))
        .collect();
    all.sort();
    all
}

fn c(job: u64, runner: &str, ran_job: bool) -> (u64, String, bool) {
    (job, runner.to_owned(), ran_job)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_claiming_at_once_never_get_one_job_twice() {
    let pg = Cluster::start();
    let mut hosts = Vec::new();
    for name in ["h1", "h2", "h3"] {
        hosts.push(host(&pg, name, LONG).await);
    }
    let jobs: Vec<u64> = (1..=40).collect();
    publish(&mut hosts[0], &jobs, &[]).await;
    // All three claim at once, one runner after another, each wanting the oldest job first,
    // until nothing is left.
    let passes = hosts.iter_mut().map(|s| {
        let jobs = jobs.clone();
        async move {
            let mut got = Vec::new();
            for i in 0..60 {
                let runner = format!("{}-r{i}", s.host_id());
                match s.claim(TARGET, &runner, &jobs).await.unwrap() {
                    Some(job) => got.push((runner, job)),
                    None => return got,
                }
            }
            panic!("more claims than queued jobs: {got:?}");
        }
    });
    let got = futures_util::future::join_all(passes).await;
    let all: Vec<u64> = got.iter().flatten().map(|(_, j)| *j).collect();
    let distinct: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(all.len(), distinct.len(), "a job claimed twice: {got:?}");
    assert_eq!(
        distinct,
        jobs.iter().copied().collect(),
        "every job claimed"
    );
    assert!(
        got.iter().filter(|g| !g.is_empty()).count() >= 2,
        "the hosts really competed: {got:?}"
    );
    assert_eq!(hosts[1].claim(TARGET, "late", &jobs).await.unwrap(), None);
    assert_eq!(
        hosts[1].claim(TARGET, "late", &[99]).await.unwrap(),
        None,
        "a job not in the queue is never claimed"
    );
    // Asking again for a runner answers the job it holds, without a second claim.
    let (runner, job) = got[2].first().or(got[0].first()).unwrap().clone();
    let owner = hosts
        .iter_mut()
        .find(|s| runner.starts_with(s.host_id()))
        .unwrap();
    assert_eq!(
        owner.claim(TARGET, &runner, &jobs).await.unwrap(),
        Some(job)
    );
    assert_eq!(hosts[0].claims().await.unwrap().len(), 40);
    let listed = hosts[0].hosts().await.unwrap();
    assert_eq!(listed.iter().map(|h| h.claims).sum::<u32>(), 40);
    assert!(listed.iter().all(|h| h.alive && h.capacity == 4));
}

/// A's runner took the job B claimed: B's runner, still idle, will take A's job, so B's claim
/// moves to it and no third runner is started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_taking_another_hosts_job_moves_that_hosts_claim_to_the_job_left() {
    let pg = Cluster::start();
    let mut a = host(&pg, "a", LONG).await;
    let mut b = host(&pg, "b", LONG).await;
    let mut h3 = host(&pg, "c", LONG).await;
    publish(&mut a, &[1, 2], &[]).await;
    assert_eq!(a.claim(TARGET, "ra", &[1, 2]).await.unwrap(), Some(1));
    assert_eq!(b.claim(TARGET, "rb", &[1, 2]).await.unwrap(), Some(2));
    // GitHub gave job 2 to ra: job 1 is still queued.
    publish(&mut a, &[1], &["ra"]).await;
    assert_eq!(claims(&a).await, vec![c(1, "rb", false)]);
    assert_eq!(
        h3.claim(TARGET, "rc", &[1]).await.unwrap(),
        None,
        "no surplus runner"
    );
    let seen = h3.published(TARGET).await.unwrap().unwrap();
    assert_eq!(seen.snapshot, "[1]");
    assert_eq!(seen.claimed_elsewhere, vec![1]);
    assert_eq!(
        b.published(TARGET)
            .await
            .unwrap()
            .unwrap()
            .claimed_elsewhere,
        Vec::<u64>::new(),
        "its own claims are not 'elsewhere'"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_job_left_the_queue_stands_for_the_next_job() {
    let pg = Cluster::start();
    let mut leader = host(&pg, "leader", LONG).await;
    let mut b = host(&pg, "b", LONG).await;
    let mut h3 = host(&pg, "c", LONG).await;
    publish(&mut leader, &[5], &[]).await;
    assert_eq!(b.claim(TARGET, "rb", &[5]).await.unwrap(), Some(5));
    // Job 5 was cancelled; rb, idle, did not take it and still waits.
    publish(&mut leader, &[], &[]).await;
    assert_eq!(claims(&b).await, vec![c(5, "rb", false)]);
    let listed = b.hosts().await.unwrap();
    assert_eq!(listed.iter().find(|h| h.host_id == "b").unwrap().claims, 1);
    // A new job: rb's claim stands for it, so nobody starts a runner for it.
    publish(&mut leader, &[6], &[]).await;
    assert_eq!(claims(&b).await, vec![c(6, "rb", false)]);
    assert_eq!(h3.claim(TARGET, "rc", &[6]).await.unwrap(), None);
    let seen = h3.published(TARGET).await.unwrap().unwrap();
    assert_eq!(seen.claimed_elsewhere, vec![6]);
    // A second new job is free for another runner.
    publish(&mut leader, &[6, 7], &[]).await;
    assert_eq!(h3.claim(TARGET, "rc", &[6, 7]).await.unwrap(), Some(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_ends_idle_frees_its_job_and_one_that_ran_a_job_counts_until_the_next_read() {
    let pg = Cluster::start();
    let mut a = host(&pg, "a", LONG).await;
    let mut b = host(&pg, "b", LONG).await;
    let mut h3 = host(&pg, "c", LONG).await;
    publish(&mut a, &[1, 2], &[]).await;
    assert_eq!(a.claim(TARGET, "ra", &[1]).await.unwrap(), Some(1));
    assert_eq!(b.claim(TARGET, "rb", &[1]).await.unwrap(), None);
    // ra failed to start: job 1 needs another runner now.
    a.finish("ra", false).await.unwrap();
    assert_eq!(b.claim(TARGET, "rb", &[1]).await.unwrap(), Some(1));
    // Another host's runner name is not this host's to finish.
    a.finish("rb", false).await.unwrap();
    assert_eq!(claims(&a).await, vec![c(1, "rb", false)]);
    // rb ran a job and ended; GitHub's listing was not read since (job 1 still shows).
    b.finish("rb", true).await.unwrap();
    assert_eq!(claims(&a).await, vec![c(1, "rb", true)]);
    assert_eq!(h3.claim(TARGET, "rc", &[1]).await.unwrap(), None);
    // The next read settles it: the claim goes and whatever is still queued is claimable.
    publish(&mut a, &[1, 2], &[]).await;
    assert!(claims(&a).await.is_empty());
    assert_eq!(h3.claim(TARGET, "rc", &[1]).await.unwrap(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_hosts_claims_are_placed_elsewhere_after_its_lease() {
    let pg = Cluster::start();
    let mut a = host(&pg, "a", LEASE).await;
    let mut b = host(&pg, "b", LEASE).await;
    publish(&mut b, &[1, 2], &[]).await;
    assert_eq!(a.claim(TARGET, "ra1", &[1, 2]).await.unwrap(), Some(1));
    assert_eq!(a.claim(TARGET, "ra2", &[1, 2]).await.unwrap(), Some(2));
    // While `a` heartbeats, its claims hold (as while its runners are being brought up).
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        a.heartbeat("l", 4, 2, None).await.unwrap();
        b.heartbeat("l", 4, 4, None).await.unwrap();
        assert_eq!(b.claim(TARGET, "rb1", &[1, 2]).await.unwrap(), None);
    }
    // `a` goes silent (crashed, cut off): after its lease its jobs are `b`'s to take, and
    // `a` itself, unheard, claims nothing.
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    b.heartbeat("l", 4, 4, None).await.unwrap();
    assert_eq!(a.claim(TARGET, "ra3", &[1, 2]).await.unwrap(), None);
    assert_eq!(b.claim(TARGET, "rb1", &[1, 2]).await.unwrap(), Some(1));
    assert_eq!(b.claim(TARGET, "rb2", &[1, 2]).await.unwrap(), Some(2));
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
    slow.heartbeat("l", 1, 1, None).await.unwrap();
    other.heartbeat("l", 1, 1, None).await.unwrap();
    publish(&mut other, &[7], &[]).await;
    assert_eq!(slow.claim(TARGET, "rs", &[7]).await.unwrap(), Some(7));
    assert_eq!(other.claim(TARGET, "ro", &[7]).await.unwrap(), None);
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    slow.heartbeat("l", 1, 0, None).await.unwrap();
    other.heartbeat("l", 1, 1, None).await.unwrap();
    // The reader's next publish drops it, the job still queued.
    publish(&mut other, &[7], &[]).await;
    assert!(
        claims(&other).await.is_empty(),
        "a runner never seen to take a job does not hold it for ever"
    );
    assert_eq!(other.claim(TARGET, "ro", &[7]).await.unwrap(), Some(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_runner_never_came_goes_at_its_hosts_next_heartbeat() {
    let pg = Cluster::start();
    let (url, pw) = PoolUrl::parse(&pg.url()).unwrap();
    // No grace: every claim is old enough to be an orphan if its runner is not reported.
    let mut settings = StoreSettings::new("a");
    settings.lease = LONG;
    settings.orphan_grace = Duration::ZERO;
    let mut a = PoolStore::connect(&url, pw.as_ref(), settings)
        .await
        .unwrap();
    a.heartbeat("l", 4, 4, Some(&[])).await.unwrap();
    // `b` keeps the default grace (30 s): its claims are always young here.
    let mut b = host(&pg, "b", LONG).await;
    publish(&mut b, &[1, 2, 3, 4, 5], &[]).await;
    assert_eq!(a.claim(TARGET, "ra1", &[1]).await.unwrap(), Some(1));
    assert_eq!(a.claim(TARGET, "ra2", &[2]).await.unwrap(), Some(2));
    assert_eq!(a.claim(TARGET, "ra3", &[3]).await.unwrap(), Some(3));
    assert_eq!(b.claim(TARGET, "rb4", &[4]).await.unwrap(), Some(4));
    // ra3 ran a job and ended: its claim counts until the next read, orphan or not.
    a.finish("ra3", true).await.unwrap();
    // Runners not known (the journal unreadable): nothing is taken for an orphan.
    a.heartbeat("l", 4, 2, None).await.unwrap();
    assert_eq!(claims(&b).await.len(), 4);
    // `a` has ra1 only: ra2's runner never came (a crash between the claim and its journal
    // entry, or an answer lost with the connection).
    let ra1 = running("ra1", TARGET, None);
    a.heartbeat("l", 4, 3, Some(std::slice::from_ref(&ra1)))
        .await
        .unwrap();
    assert_eq!(
        claims(&b).await,
        vec![c(1, "ra1", false), c(3, "ra3", true), c(4, "rb4", false)],
        "only a's claim without a runner goes; ran-job claims and b's stay"
    );
    // Its job is free for any host now, not after the bring-up bound.
    assert_eq!(b.claim(TARGET, "rb2", &[2]).await.unwrap(), Some(2));
    // A young claim without its runner yet (being journalled) stays: `b` reports no runner.
    b.heartbeat("l", 4, 2, Some(&[])).await.unwrap();
    assert_eq!(
        claims(&b).await,
        vec![
            c(1, "ra1", false),
            c(2, "rb2", false),
            c(3, "ra3", true),
            c(4, "rb4", false)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_host_reads_a_targets_demand_and_the_others_read_what_it_published() {
    let pg = Cluster::start();
    let mut a = host(&pg, "a", LEASE).await;
    let mut b = host(&pg, "b", LEASE).await;
    assert!(a.lead(TARGET).await.unwrap());
    assert!(!b.lead(TARGET).await.unwrap(), "one reader per target");
    assert!(
        b.lead("org:octo").await.unwrap(),
        "another target has its own"
    );
    assert_eq!(b.published(TARGET).await.unwrap(), None);
    assert!(a.publish(TARGET, "snap-1", &[3, 5, 9], &[]).await.unwrap());
    assert!(
        !b.publish(TARGET, "snap-b", &[1], &[]).await.unwrap(),
        "only the reader publishes"
    );
    assert_eq!(a.claim(TARGET, "ra", &[3]).await.unwrap(), Some(3));
    assert_eq!(b.claim(TARGET, "rb", &[5]).await.unwrap(), Some(5));
    let seen_by_b = b.published(TARGET).await.unwrap().unwrap();
    assert_eq!(seen_by_b.snapshot, "snap-1");
    assert!(seen_by_b.age < Duration::from_secs(5), "{seen_by_b:?}");
    assert_eq!(seen_by_b.claimed_elsewhere, vec![3]);
    assert_eq!(
        a.published(TARGET)
            .await
            .unwrap()
            .unwrap()
            .claimed_elsewhere,
        vec![5]
    );
    assert_eq!(b.published("org:octo").await.unwrap(), None);
    assert!(a.lead(TARGET).await.unwrap(), "the reader keeps its lease");

    // The reader goes silent: another host takes over after the lease, keeping the snapshot.
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    b.heartbeat("l", 4, 4, None).await.unwrap();
    assert!(b.lead(TARGET).await.unwrap());
    assert!(!a.lead(TARGET).await.unwrap());
    assert_eq!(
        b.published(TARGET).await.unwrap().unwrap().snapshot,
        "snap-1"
    );
    // The old reader's late publish changes nothing: not the snapshot, the queue, or the
    // claims (its own lapsed one, and the one it says took a job).
    assert!(!a
        .publish(TARGET, "snap-late", &[], &["rb".to_owned()])
        .await
        .unwrap());
    let seen = b.published(TARGET).await.unwrap().unwrap();
    assert_eq!(seen.snapshot, "snap-1");
    assert_eq!(
        pg.psql("SELECT string_agg(job_id::text, ',' ORDER BY job_id) FROM rm_pool_queue"),
        "3,5,9"
    );
    assert_eq!(claims(&b).await, vec![c(3, "ra", false), c(5, "rb", false)]);
    assert!(b.publish(TARGET, "snap-2", &[5], &[]).await.unwrap());
    let seen = a.published(TARGET).await.unwrap().unwrap();
    assert_eq!(seen.snapshot, "snap-2");
    assert_eq!(seen.claimed_elsewhere, vec![5]);
    assert_eq!(
        claims(&b).await,
        vec![c(5, "rb", false)],
        "the silent host's claim went"
    );
}

/// A live host that listens for the readers' news.
async fn listening(cluster: &Cluster, name: &str) -> (PoolStore, Arc<News>) {
    let (url, pw) = PoolUrl::parse(&cluster.url()).unwrap();
    let news = Arc::new(News::new(name));
    let mut settings = StoreSettings::new(name);
    settings.lease = LONG;
    settings.news = Some(Arc::clone(&news));
    let mut s = PoolStore::connect(&url, pw.as_ref(), settings)
        .await
        .unwrap();
    s.heartbeat("rm-pool-linux-x64", 4, 4, None).await.unwrap();
    (s, news)
}

/// Nothing is heard within a second. A wrong notification would arrive within milliseconds
/// of the commit, so a second's silence is a fair "none was sent", and never flaky: a quiet
/// channel always passes.
async fn hears_nothing(news: &News) {
    let heard = tokio::time::timeout(Duration::from_secs(1), news.next()).await;
    assert!(heard.is_err(), "heard {heard:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_leaves_jobs_unclaimed_tells_the_other_hosts_at_once() {
    let pg = Cluster::start();
    let (mut a, a_news) = listening(&pg, "a").await;
    let (mut b, b_news) = listening(&pg, "b").await;
    publish(&mut a, &[1, 2], &[]).await;
    let heard = tokio::time::timeout(Duration::from_secs(10), b_news.next()).await;
    assert_eq!(heard.expect("b heard nothing"), vec![TARGET.to_owned()]);

    // Every queued job is claimed: nothing for anyone to act on, nothing told.
    assert_eq!(b.claim(TARGET, "rb1", &[1]).await.unwrap(), Some(1));
    assert_eq!(b.claim(TARGET, "rb2", &[2]).await.unwrap(), Some(2));
    publish(&mut a, &[1, 2], &[]).await;
    publish(&mut a, &[], &["rb1", "rb2"]).await;
    hears_nothing(&b_news).await;

    // A new job no claim holds is news again; the reader never tells itself.
    publish(&mut a, &[3], &[]).await;
    let heard = tokio::time::timeout(Duration::from_secs(10), b_news.next()).await;
    assert_eq!(heard.expect("b heard nothing"), vec![TARGET.to_owned()]);
    hears_nothing(&a_news).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_ends_tells_the_other_hosts_so_the_reader_looks_at_once() {
    let pg = Cluster::start();
    let (mut a, a_news) = listening(&pg, "a").await;
    let (mut b, b_news) = listening(&pg, "b").await;
    publish(&mut a, &[1, 2], &[]).await;
    // The publish left both jobs unclaimed: that news is not what this test is about.
    tokio::time::timeout(Duration::from_secs(10), b_news.next())
        .await
        .expect("b heard nothing of the publish");
    assert_eq!(b.claim(TARGET, "rb1", &[1]).await.unwrap(), Some(1));
    assert_eq!(b.claim(TARGET, "rb2", &[2]).await.unwrap(), Some(2));

    // After a job, and without one: either way the reader hears of it, the ender does not.
    b.finish("rb1", true).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), a_news.next()).await;
    assert_eq!(heard.expect("a heard nothing"), vec![TARGET.to_owned()]);
    b.finish("rb2", false).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), a_news.next()).await;
    assert_eq!(heard.expect("a heard nothing"), vec![TARGET.to_owned()]);
    hears_nothing(&b_news).await;

    // A runner no claim is known for (told twice, or from before a leave) is no news.
    b.finish("rb2", false).await.unwrap();
    hears_nothing(&a_news).await;
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
    assert_eq!(
        pg.psql("SELECT schema_version FROM rm_pool_meta"),
        SCHEMA_VERSION.to_string()
    );
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
                supported: SCHEMA_VERSION
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
    let mut a = host(&pg, "a", LONG).await;
    publish(&mut a, &[1], &[]).await;
    assert_eq!(a.claim(TARGET, "ra", &[1]).await.unwrap(), Some(1));
    pg.halt();
    let err = a.heartbeat("l", 2, 2, None).await.unwrap_err();
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
    let mut b = host(&pg, "a", LONG).await;
    assert_eq!(
        claims(&b).await,
        vec![c(1, "ra", false)],
        "claims survive a database restart"
    );
    assert_eq!(b.claim(TARGET, "ra", &[1]).await.unwrap(), Some(1));
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
async fn a_host_that_leaves_frees_its_jobs_and_its_reading_at_once() {
    let pg = Cluster::start();
    let mut a = host(&pg, "a", LONG).await;
    let mut b = host(&pg, "b", LONG).await;
    publish(&mut a, &[4], &[]).await;
    assert_eq!(a.claim(TARGET, "ra", &[4]).await.unwrap(), Some(4));
    assert!(!b.lead(TARGET).await.unwrap());
    a.leave().await.unwrap();
    assert_eq!(b.claim(TARGET, "rb", &[4]).await.unwrap(), Some(4));
    assert!(b.lead(TARGET).await.unwrap());
    assert_eq!(
        b.published(TARGET).await.unwrap().unwrap().snapshot,
        "[4]",
        "the last snapshot stays until the new reader publishes"
    );
    assert!(b.hosts().await.unwrap().iter().all(|h| h.host_id != "a"));
}

fn running(runner: &str, target: &str, job: Option<(u64, &str)>) -> Running {
    Running {
        runner: runner.to_owned(),
        target: target.to_owned(),
        job_id: job.map(|(id, _)| id),
        job_name: job.map(|(_, name)| name.to_owned()),
    }
}

/// (host, its runners) as `s` reads the pool.
async fn who_runs_what(s: &PoolStore) -> Vec<(String, Vec<Running>)> {
    s.hosts()
        .await
        .unwrap()
        .into_iter()
        .map(|h| (h.host_id, h.running))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_host_shows_the_others_who_runs_what_as_of_its_last_heartbeat() {
    let pg = Cluster::start();
    let mut a = host(&pg, "a", LONG).await;
    let mut b = host(&pg, "b", LONG).await;
    let starting = running("rm-a-1", "octo/hello", None);
    let busy = running("rm-a-2", "octo/world", Some((42, "build (linux)")));
    a.heartbeat("l", 4, 2, Some(&[busy.clone(), starting.clone()]))
        .await
        .unwrap();
    b.heartbeat(
        "l",
        4,
        3,
        Some(&[running("rm-b-1", "octo/hello", Some((7, "test")))]),
    )
    .await
    .unwrap();
    assert_eq!(
        who_runs_what(&b).await,
        vec![
            ("a".to_owned(), vec![starting.clone(), busy.clone()]),
            (
                "b".to_owned(),
                vec![running("rm-b-1", "octo/hello", Some((7, "test")))]
            ),
        ],
        "by host, then target and runner"
    );

    // The starting runner took a job; the busy one ended: the next heartbeat says so.
    let took = running("rm-a-1", "octo/hello", Some((43, "lint")));
    a.heartbeat("l", 4, 3, Some(std::slice::from_ref(&took)))
        .await
        .unwrap();
    assert_eq!(who_runs_what(&b).await[0].1, vec![took.clone()]);

    // An unchanged list is not written again: rows changed behind its back stay changed
    // until the host's runners change (one statement per heartbeat when nothing happened).
    pg.psql("UPDATE rm_pool_running SET job_name = 'edited' WHERE host_id = 'a'");
    a.heartbeat("l", 4, 3, Some(std::slice::from_ref(&took)))
        .await
        .unwrap();
    assert_eq!(
        who_runs_what(&b).await[0].1[0].job_name.as_deref(),
        Some("edited")
    );

    // A host that leaves takes its runners out of the view with it; one whose lease lapsed
    // keeps them (shown not alive: what it ran when it was last heard of).
    a.leave().await.unwrap();
    assert_eq!(
        pg.psql("SELECT count(*) FROM rm_pool_running WHERE host_id = 'a'"),
        "0"
    );
    assert_eq!(who_runs_what(&b).await.len(), 1);
    let mut c = host(&pg, "c", Duration::from_secs(1)).await;
    c.heartbeat("l", 2, 1, Some(&[running("rm-c-1", "octo/hello", None)]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let hosts = b.hosts().await.unwrap();
    let c_row = hosts.iter().find(|h| h.host_id == "c").unwrap();
    assert!(!c_row.alive);
    assert_eq!(c_row.running, vec![running("rm-c-1", "octo/hello", None)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_the_first_schema_is_brought_up_to_date_without_losing_claims() {
    let pg = Cluster::start();
    let mut a = host(&pg, "a", LONG).await;
    publish(&mut a, &[5], &[]).await;
    assert_eq!(a.claim(TARGET, "ra", &[5]).await.unwrap(), Some(5));
    drop(a);
    // The database as a host of schema 1 left it.
    pg.psql("DROP TABLE rm_pool_running");
    pg.psql("UPDATE rm_pool_meta SET schema_version = 1");
    let mut b = host(&pg, "b", LONG).await;
    assert_eq!(
        pg.psql("SELECT schema_version FROM rm_pool_meta"),
        SCHEMA_VERSION.to_string()
    );
    b.heartbeat("l", 4, 4, Some(&[running("rm-b-1", "octo/hello", None)]))
        .await
        .unwrap();
    assert_eq!(who_runs_what(&b).await[1].1.len(), 1);
    assert_eq!(claims(&b).await, vec![c(5, "ra", false)], "claims kept");
}
