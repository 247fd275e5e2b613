//! Conditional requests offering the last few versions: a list that goes back to an earlier
//! state (a run leaving the `queued` list) is a free 304, and a server that compares only one
//! tag is noticed once and then asked with one.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns; a panic is a failed test

mod common;

use common::*;
use rm_testkit::{Conclusion, FakeConfig, JobSpec};

const LABEL: &str = "rm-home-linux-x64";

/// Charged `workflow_runs` requests of one demand poll.
async fn runs_charged_by_a_poll(w: &World, client: &rm_github::GitHubClient) -> u64 {
    w.fake.reset_counters();
    client.demand(&target("alice/app")).await.unwrap();
    w.fake.counters().endpoint("workflow_runs").charged
}

/// Queues a one-job run, polls it, finishes it; returns what the poll after it left charged.
async fn a_run_comes_and_goes(w: &World, client: &rm_github::GitHubClient) -> u64 {
    let job = w
        .fake
        .queue_job("alice/app", JobSpec::new("build", &[LABEL]))
        .unwrap();
    assert_eq!(runs_charged_by_a_poll(w, client).await, 1, "it appeared");
    w.fake.finish_job(job, Conclusion::Success).unwrap();
    let charged = runs_charged_by_a_poll(w, client).await;
    assert!(client
        .demand(&target("alice/app"))
        .await
        .unwrap()
        .jobs
        .is_empty());
    charged
}

#[tokio::test]
async fn a_list_back_to_an_earlier_state_is_a_free_304() {
    let w = world().await;
    // The first poll reads both (empty) lists.
    assert_eq!(runs_charged_by_a_poll(&w, &w.client).await, 2);
    assert_eq!(runs_charged_by_a_poll(&w, &w.client).await, 0);
    assert_eq!(
        a_run_comes_and_goes(&w, &w.client).await,
        0,
        "the queued list is empty again: the version seen before is current"
    );
    // Over and over: every return is free.
    assert_eq!(a_run_comes_and_goes(&w, &w.client).await, 0);

    // Remembering only the newest version, the same return is charged.
    let mut c = config(&w.fake);
    c.etag_versions = 1;
    let (one, _) = client_with(c, Some(credential(&w.token)));
    assert_eq!(runs_charged_by_a_poll(&w, &one).await, 2);
    assert_eq!(a_run_comes_and_goes(&w, &one).await, 1);
}

#[tokio::test]
async fn a_server_comparing_one_tag_is_asked_with_one_after_the_first_sign() {
    let w = world_with(FakeConfig {
        if_none_match_lists: false,
        ..FakeConfig::default()
    })
    .await;
    assert_eq!(runs_charged_by_a_poll(&w, &w.client).await, 2);
    // The run comes and goes: on the way back the client offers two versions of the queued
    // list; this server does not match a list, so that costs a 200 once...
    assert_eq!(a_run_comes_and_goes(&w, &w.client).await, 1);
    // ...and from then on one tag is offered, so unchanged lists are free again, not charged
    // on every poll.
    for _ in 0..3 {
        assert_eq!(runs_charged_by_a_poll(&w, &w.client).await, 0);
    }
    assert_eq!(a_run_comes_and_goes(&w, &w.client).await, 1);
    assert_eq!(runs_charged_by_a_poll(&w, &w.client).await, 0);
}
