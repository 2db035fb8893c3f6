//! The order in which due jobs run (`docs/design.md`, Priorities and Fair
//! scheduling): a tenant's jobs by rank (priority, with aging, then
//! arrival), and tenants in turn. Asserted on the jobs each claim (or the
//! relay) hands over, in order: no clock is read, no start time compared.

use serde_json::json;
use shared::model::Priority;
use store::{NewJob, Store};
use testkit::{Backend, TestEnv};
use worker::{
    Runner,
    drive::{DueClaims, deliver_due_jobs},
};

use crate::{
    harness::{new_job, runner, runner_with, submit_due_since},
    on_both_backends,
};

on_both_backends!(
    a_claim_takes_a_tenants_jobs_by_priority_then_arrival,
    the_relay_hands_over_a_tenants_jobs_by_priority_then_arrival,
    a_low_job_waits_behind_higher_ones_at_most_its_aging_in_a_claim,
    a_low_job_waits_behind_higher_ones_at_most_its_aging_at_the_relay,
    tenants_take_turns_in_a_claim_whatever_their_backlogs,
    a_tenants_job_is_claimed_next_behind_another_tenants_backlog,
);

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;

fn sleep_job(tenant: &str, priority: Priority) -> NewJob {
    NewJob {
        priority,
        ..new_job(tenant, "sleep", &json!({"ms": 0}))
    }
}

/// Submits `job` due `due_ago_ms` ago.
async fn due_since(store: &Store, job: NewJob, due_ago_ms: i64) -> String {
    submit_due_since(store, job, due_ago_ms).await
}

/// Runs one claim of one job at a time until none is due; the jobs in the
/// order they ran.
async fn claimed_one_by_one(runner: &Runner) -> Vec<String> {
    let mut claims = DueClaims::new();
    let mut ran = Vec::new();
    loop {
        let claimed = claims.run_next(runner, 1).await.expect("claim");
        if claimed.is_empty() {
            return ran;
        }
        ran.extend(claimed);
    }
}

/// Tenant A's backlog: three low jobs in order of arrival, then a normal
/// and a high one, all due within a few seconds. Answers them in the
/// order they must run.
async fn mixed_backlog(store: &Store) -> Vec<String> {
    let mut lows = Vec::new();
    for ago in [4_000, 3_000, 2_000] {
        lows.push(due_since(store, sleep_job("tenant-a", Priority::Low), ago).await);
    }
    let normal = due_since(store, sleep_job("tenant-a", Priority::Normal), 1_000).await;
    let high = due_since(store, sleep_job("tenant-a", Priority::High), 0).await;
    let mut order = vec![high, normal];
    order.extend(lows);
    order
}

async fn a_claim_takes_a_tenants_jobs_by_priority_then_arrival(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let order = mixed_backlog(&runner.store).await;

    let ran = claimed_one_by_one(&runner).await;

    assert_eq!(ran, order);
}

async fn the_relay_hands_over_a_tenants_jobs_by_priority_then_arrival(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let order = mixed_backlog(&runner.store).await;

    let delivered = deliver_due_jobs(&runner).await.expect("run");

    assert_eq!(delivered, order);
}

/// With an aging of an hour: a low job due two and a half hours ago, a
/// high job due now, and a low job due a minute ago. The early low job's
/// two steps of aging are over, so it ranks before the high job; the
/// late one's are not. Answers them in the order they must run.
async fn aged_backlog(store: &Store) -> Vec<String> {
    let early_low = due_since(
        store,
        sleep_job("tenant-a", Priority::Low),
        2 * HOUR + 30 * MINUTE,
    )
    .await;
    let late_low = due_since(store, sleep_job("tenant-a", Priority::Low), MINUTE).await;
    let high = due_since(store, sleep_job("tenant-a", Priority::High), 0).await;
    vec![early_low, high, late_low]
}

async fn a_low_job_waits_behind_higher_ones_at_most_its_aging_in_a_claim(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner_with(&env, &["--priority-aging", "1h"]).await;
    let order = aged_backlog(&runner.store).await;

    let ran = claimed_one_by_one(&runner).await;

    assert_eq!(ran, order);
}

async fn a_low_job_waits_behind_higher_ones_at_most_its_aging_at_the_relay(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner_with(&env, &["--priority-aging", "1h"]).await;
    let order = aged_backlog(&runner.store).await;

    let delivered = deliver_due_jobs(&runner).await.expect("run");

    assert_eq!(delivered, order);
}

async fn tenants_take_turns_in_a_claim_whatever_their_backlogs(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let store = &runner.store;
    // Each tenant's jobs in order of arrival.
    let mut a = Vec::new();
    for ago in [9_000, 8_000, 7_000, 6_000] {
        a.push(due_since(store, sleep_job("tenant-a", Priority::Normal), ago).await);
    }
    let b = due_since(store, sleep_job("tenant-b", Priority::Normal), 0).await;
    let mut c = Vec::new();
    for ago in [5_000, 4_000] {
        c.push(due_since(store, sleep_job("tenant-c", Priority::Normal), ago).await);
    }
    let mut claims = DueClaims::new();

    let first = claims.run_next(&runner, 3).await.expect("claim");
    let second = claims.run_next(&runner, 2).await.expect("claim");
    let third = claims.run_next(&runner, 3).await.expect("claim");
    let fourth = claims.run_next(&runner, 3).await.expect("claim");

    // One job per tenant in turn; the next claim starts after the tenant
    // the last one served last.
    assert_eq!(first, [a[0].clone(), b.clone(), c[0].clone()]);
    assert_eq!(second, [a[1].clone(), c[1].clone()]);
    // Only A is left: a claim takes as many of its jobs as it has room for.
    assert_eq!(third, [a[2].clone(), a[3].clone()]);
    assert!(fourth.is_empty(), "{fourth:?}");
}

async fn a_tenants_job_is_claimed_next_behind_another_tenants_backlog(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let runner = runner(&env, "0s").await;
    let store = &runner.store;
    let mut backlog = Vec::new();
    for i in 0..50 {
        backlog.push(due_since(store, sleep_job("tenant-a", Priority::Normal), 60_000 - i).await);
    }
    let mut claims = DueClaims::new();
    let first = claims.run_next(&runner, 1).await.expect("claim");
    assert_eq!(first, [backlog[0].clone()]);
    // Submitted behind 49 of A's jobs, every one of them due before it.
    let b = due_since(store, sleep_job("tenant-b", Priority::Normal), 0).await;

    let next = claims.run_next(&runner, 1).await.expect("claim");
    let then = claims.run_next(&runner, 2).await.expect("claim");

    assert_eq!(next, [b], "B's job is claimed next");
    assert_eq!(then, [backlog[1].clone(), backlog[2].clone()]);
}
