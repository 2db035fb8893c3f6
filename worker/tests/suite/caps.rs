//! Concurrency caps (`docs/design.md`, Concurrency caps): a claim parks
//! the jobs a cap holds back, and each job that ends wakes one parked job
//! of its tenant (or kind), which a later claim or delivery runs.
//! Asserted on the jobs each claim or delivery runs, with no clock.

use serde_json::json;
use shared::model::{Cap, JobStatus, ResultBody};
use store::{Store, SuccessWrite};
use testkit::{Backend, TestEnv};
use worker::{
    Runner,
    drive::{DueClaims, deliver_due_jobs},
};

use crate::{
    harness::{job, new_job, runner_with, submit_due_since},
    on_both_backends,
};

on_both_backends!(
    a_tenant_cap_parks_what_a_claim_takes_over_it_and_each_end_wakes_one,
    the_cap_of_a_kind_parks_only_that_kind,
    a_cap_holds_back_deliveries_until_the_running_job_ends,
);

/// Submits a job of `tenant` due `due_ago_ms` ago.
async fn submit(store: &Store, tenant: &str, kind: &str, due_ago_ms: i64) -> String {
    let params = match kind {
        "gst-summary" => json!({"month": "2026-10"}),
        _ => json!({"ms": 0}),
    };
    submit_due_since(store, new_job(tenant, kind, &params), due_ago_ms).await
}

/// Where the job waits: `None` when it is not parked.
async fn parked_at(store: &Store, job_id: &str) -> Option<Cap> {
    let job = job(store, job_id).await;
    assert_eq!(job.status, JobStatus::Queued, "{job_id} is not waiting");
    job.capped
}

async fn succeeded(store: &Store, job_ids: &[String]) {
    for job_id in job_ids {
        assert_eq!(job(store, job_id).await.status, JobStatus::Succeeded);
    }
}

async fn a_tenant_cap_parks_what_a_claim_takes_over_it_and_each_end_wakes_one(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner: Runner = runner_with(&env, &["--max-running-per-tenant", "2"]).await;
    let store = &runner.store;
    let mut a = Vec::new();
    for ago in [9_000, 8_000, 7_000, 6_000, 5_000] {
        a.push(submit(store, "tenant-a", "sleep", ago).await);
    }
    let mut b = Vec::new();
    for ago in [4_000, 3_000] {
        b.push(submit(store, "tenant-b", "sleep", ago).await);
    }
    let mut claims = DueClaims::new();

    // A share of five for each tenant: A's first two start, its other three
    // are parked, and B's two are not held back by A's backlog.
    let first = claims.run_next(&runner, 10).await.expect("claim");

    // In the order the claim took them: the tenants in turn.
    assert_eq!(
        first,
        [a[0].clone(), b[0].clone(), a[1].clone(), b[1].clone()]
    );
    succeeded(store, &first).await;
    // A's two ends woke its first two parked jobs, in rank order.
    assert_eq!(parked_at(store, &a[2]).await, None);
    assert_eq!(parked_at(store, &a[3]).await, None);
    assert_eq!(parked_at(store, &a[4]).await, Some(Cap::Tenant));

    let second = claims.run_next(&runner, 10).await.expect("claim");
    assert_eq!(second, [a[2].clone(), a[3].clone()]);
    let third = claims.run_next(&runner, 10).await.expect("claim");
    assert_eq!(third, [a[4].clone()]);
    let fourth = claims.run_next(&runner, 10).await.expect("claim");
    assert!(fourth.is_empty(), "{fourth:?}");
    succeeded(store, &a).await;
}

async fn the_cap_of_a_kind_parks_only_that_kind(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner_with(&env, &["--max-running-per-kind", "gst-summary=1"]).await;
    let store = &runner.store;
    let mut summaries = Vec::new();
    for ago in [9_000, 8_000, 7_000] {
        summaries.push(submit(store, "tenant-a", "gst-summary", ago).await);
    }
    let mut sleeps = Vec::new();
    for ago in [6_000, 5_000] {
        sleeps.push(submit(store, "tenant-a", "sleep", ago).await);
    }
    let other_tenant = submit(store, "tenant-b", "gst-summary", 4_000).await;
    let mut claims = DueClaims::new();

    // A share of six for each tenant: every job is taken.
    let first = claims.run_next(&runner, 12).await.expect("claim");

    // One summary of each tenant (the cap is per tenant), and every sleep.
    assert_eq!(
        first,
        [
            summaries[0].clone(),
            other_tenant.clone(),
            sleeps[0].clone(),
            sleeps[1].clone(),
        ]
    );
    assert_eq!(parked_at(store, &summaries[1]).await, None, "woken");
    assert_eq!(parked_at(store, &summaries[2]).await, Some(Cap::Kind));

    assert_eq!(
        claims.run_next(&runner, 12).await.expect("claim"),
        [summaries[1].clone()]
    );
    assert_eq!(
        claims.run_next(&runner, 12).await.expect("claim"),
        [summaries[2].clone()]
    );
    succeeded(store, &summaries).await;
}

/// Deliveries (the relay's, as over Redis) go through the same claim: a
/// job over the cap is parked and its delivery let go; the end of the job
/// holding the cap wakes it with an outbox row due at once.
async fn a_cap_holds_back_deliveries_until_the_running_job_ends(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner_with(&env, &["--max-running-per-tenant", "1"]).await;
    let store = &runner.store;
    let holder = submit(store, "tenant-a", "sleep", 9_000).await;
    let claim = store
        .claim_attempt(&holder, "another-worker", shared::time::now_ms() + 60_000)
        .await
        .expect("claim")
        .expect("the holder runs");
    let waiting = [
        submit(store, "tenant-a", "sleep", 8_000).await,
        submit(store, "tenant-a", "sleep", 7_000).await,
    ];
    let other_tenant = submit(store, "tenant-b", "sleep", 6_000).await;

    let delivered = deliver_due_jobs(&runner).await.expect("run");

    assert_eq!(
        delivered,
        [waiting[0].clone(), waiting[1].clone(), other_tenant.clone()]
    );
    assert_eq!(parked_at(store, &waiting[0]).await, Some(Cap::Tenant));
    assert_eq!(parked_at(store, &waiting[1]).await, Some(Cap::Tenant));
    succeeded(store, std::slice::from_ref(&other_tenant)).await;
    assert!(deliver_due_jobs(&runner).await.expect("run").is_empty());

    let ended = store
        .finish_succeeded(&[SuccessWrite::new(
            &holder,
            claim.attempt,
            ResultBody::Document("{}".into()),
        )])
        .await
        .expect("the holder ends");
    assert_eq!(ended, [true]);

    // Each end wakes the next: both run, one after the other, in one call.
    let delivered = deliver_due_jobs(&runner).await.expect("run");
    assert_eq!(delivered, waiting);
    succeeded(store, &waiting).await;
}
